"""llama.cpp engine: serves GGUF files, one sequence at a time per worker.

The chat template comes from the GGUF metadata (ChatML when there is none) and is
rendered here, where the tokenizer lives. Prefix reuse is llama.cpp's own: the worker
keeps the previous turn's tokens in its context, so a session pinned to this worker
prefills only what is new; `cached_tokens` reports how much was reused. A person's turn
sets a running API reply aside at a token boundary and it resumes after as its own
continuation (core.engines.turn_order decides, core.engines.llama_pause keeps its state);
the API reply's step in flight is cut short and done again after (core.engines.llama_abort).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.engines.base import (
    EngineLoadError,
    GenerationRequest,
    ModelSpec,
    SamplingParams,
    template_switches,
)
from core.engines.base_prompt import BaseFormat, base_format, effective_repetition_penalty
from core.engines.kv_llama import LlamaKvKeeper
from core.engines.llama_abort import StepAbort
from core.engines.llama_lookup import Penalties, exact_rows, lookup_stream
from core.engines.llama_params import load_llama, repack_weights, worker_threads
from core.engines.llama_pause import Restart, SampleTap, Snapshot, at_token_boundary, restore, take
from core.engines.llama_prefill import ChunkedPrefill
from core.engines.llama_sampling import (
    Unsupported,
    completion_options,
    logprob_stream,
    penalty_window,
)
from core.engines.llama_vision import (
    ContextOverflow,
    ImageError,
    Prefill,
    Projector,
    ProjectorError,
    find_mmproj,
    image_paths,
    with_markers,
)
from core.engines.reply_tail import ReplyTail
from core.engines.speculative import Acceptance, speculable
from core.engines.templates import fallback_template, template_stops
from core.engines.tool_grammar import (
    LlamaProcessors,
    LlamaToolProcessor,
    ToolGrammars,
    forces_generic_call,
    generic_call_messages,
    llama_tool_grammars,
)
from core.engines.turn_order import TurnOrder
from core.events import Done, Error, Event, Logprobs, PromptRead, TextDelta, Usage
from core.parsing.detect import detect_family

# No tokenizer packs more characters into one token (core.server.limits uses the same bound).
MAX_CHARS_PER_TOKEN = 64


class _Active:
    """The one request this engine is generating."""

    def __init__(self, request: GenerationRequest, stream: Iterator[dict], prompt_tokens: int,
                 cached: int, stops: list[str]) -> None:
        self.request = request
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        # Every stop (the request's, the prompt's turn markers) is matched here, not by
        # llama-cpp-python: at max_tokens it flushes the text it held back as a possible
        # stop, so a base model's reply ended "Hello,\n\nUser".
        self.tail = ReplyTail(stops)  # and a base prompt's leading space (trim_start)
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.completion_tokens = 0
        self.kv_text: str | None = None  # the rendered chat prompt, for the disk cache
        self.kv_prompt: list[int] = []
        self.reply = ""  # the text streamed out, for the disk cache's next-turn form
        self.prefill: ChunkedPrefill | None = None  # a long prompt, a chunk per step
        # set aside for a person's turn (core.engines.llama_pause): how to go on, if it can
        self.restart: Restart | None = None
        self.limit = 0  # the reply's max_tokens
        self.last_token: int | None = None  # the token sampled last (not yet in the context)
        self.before = 0  # reply tokens before the current stream's prompt ends (resumed)
        # the tokens the current stream was started over, and whether it has yielded yet:
        # a step cut short before its first chunk is redone by starting it again
        self.stream_prompt: list[int] = []
        self.fresh = True

    def usage(self) -> Usage:
        now = time.perf_counter()
        first = self.first_token_at or now
        ttft_ms = (first - self.started) * 1000.0
        decode_s = now - first
        tps = (self.completion_tokens - 1) / decode_s if decode_s > 0 and self.completion_tokens > 1 else 0.0
        return Usage(self.prompt_tokens, self.cached, self.completion_tokens, ttft_ms, tps)


class LlamaCppEngine:
    """llama_cpp.Llama behind the Engine protocol."""

    name = "llamacpp"
    max_concurrency = 1
    preempts = True  # a person's turn sets a running API reply aside (core.engines.turn_order)

    def __init__(self, spec: ModelSpec) -> None:
        path = Path(spec.path)
        if not path.is_file():
            raise EngineLoadError(
                "LOAD_FAILED",
                f"Model file not found: {path}. Pick another model, or restore the "
                "bundled one with `llmdeck models restore-default`.",
            )
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        # Its share of the cores among the model's replicas (core.engines.llama_params).
        threads = self.threads = worker_threads(
            spec.option("threads"), spec.option("replicas"), spec.option("replica"))
        # Speculation's verifying passes match one-token passes bit for bit only with flash
        # attention (core.engines.llama_lookup); "flash_attn" overrides.
        flash = bool(spec.option("flash_attn", spec.option("speculative", True)))
        self._flash_fallback = False
        try:
            try:
                self._llm = self._load(spec, path, threads, flash)
            except (ValueError, RuntimeError):
                if not flash or spec.option("flash_attn") is not None:
                    raise
                # A model whose attention flash attention cannot run here: load it without,
                # and without drafts (they would no longer be exact).
                self._llm = self._load(spec, path, threads, False)
                self._flash_fallback = True
        except (ValueError, RuntimeError) as exc:
            from core.model_files.gguf_header import unsupported_architecture, unsupported_sentence

            if arch := unsupported_architecture(path):  # whole, but too new for this build
                raise EngineLoadError("UNSUPPORTED", unsupported_sentence(path.name, arch)) from exc
            raise EngineLoadError(
                "MODEL_CORRUPT",
                f"The model file {path.name} could not be loaded; it may be corrupt or "
                f"truncated. Download it again. ({exc})",
            ) from exc
        meta = self._llm.metadata or {}
        self._template = meta.get("tokenizer.chat_template")
        eos = self._token_text(self._llm.token_eos())
        bos = self._token_text(self._llm.token_bos())
        self._model_type = meta.get("general.architecture")
        # No template in the file: a base model, prompted as a plain transcript
        # (core.engines.base_prompt). The "turns" option renders the architecture's chat
        # turns instead, which bench/base_prompt.py compares against.
        self.base_model = not self._template
        self._base: BaseFormat | None = None
        if self._template:
            template, self._turn_stops = self._template, template_stops(self._template)
        else:
            template, self._turn_stops = fallback_template(self._model_type)
            if spec.option("base_format") != "turns":
                self._base = base_format(spec.option("base_format"))
        self._formatter = Jinja2ChatFormatter(
            template=template, eos_token=eos, bos_token=bos,
            stop_token_ids=[self._llm.token_eos()],
        )
        self._spec = spec
        # A vision projector beside the model (or the mmproj option): images in the prompt
        # (core.engines.llama_vision). One that does not fit is a load failure, said plainly.
        self._vision: Projector | None = None
        try:
            mmproj = find_mmproj(path, spec.option("mmproj"))
            if mmproj is not None and spec.option("vision", True):
                self._vision = Projector(self._llm, mmproj, threads=threads,
                                         use_gpu=int(spec.option("gpu_layers", -1)) != 0)
        except ProjectorError as exc:
            self._llm.close()
            raise EngineLoadError("LOAD_FAILED", str(exc)) from exc
        # Prompt-lookup drafting for greedy requests; `acceptance` is the last one's record.
        # Recurrent and hybrid models cannot drop rejected drafts from their state.
        self.speculative = bool(spec.option("speculative", True)) and not self._flash_fallback \
            and not (getattr(self._llm, "_is_recurrent", False)
                     or getattr(self._llm, "_is_hybrid", False))
        # Tokens a verifying pass may hold and stay exact: fewer on repacked weights.
        self.exact_rows = exact_rows(repack_weights())
        self.acceptance: Acceptance | None = None
        self._tool_grammars: ToolGrammars | None = None  # made on the first request with tools
        self._queue: deque[GenerationRequest] = deque()
        self._order: TurnOrder[tuple[_Active, Snapshot]] = TurnOrder(self._queue)
        self._tap = SampleTap(self._llm)
        self._abort = StepAbort(self._llm)  # an API reply's step cut for a person's turn
        self._active: _Active | None = None
        self._out: list[tuple[str, list[Event]]] = []
        # kv-disk hook (issue 33): sequence state on disk across restarts (core.engines.kv_llama)
        self._kv = None if self._vision is not None else LlamaKvKeeper.open(
            spec.option("kv_disk_gb"), path, llm=self._llm,
            family=detect_family(self._template, self._model_type),
            render=lambda msgs, tools, thinking: self._formatter(
                messages=list(msgs), tools=list(tools) or None,
                **template_switches(self._template, thinking)).prompt,
            tokenize=lambda text: self._tokenize(text, add_bos=False, special=True))

    @staticmethod
    def _load(spec: ModelSpec, path: Path, threads: int, flash: bool) -> Any:
        return load_llama(
            model_path=str(path),
            n_ctx=spec.context_size,
            n_threads=threads,
            n_gpu_layers=int(spec.option("gpu_layers", -1)),
            verbose=False,
            logits_all=False,
            flash_attn=flash,
        )

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._llm.detokenize([token], special=True).decode("utf-8", errors="ignore")

    def _repetition_penalty(self, s: SamplingParams) -> float:
        return effective_repetition_penalty(s, self.base_model)

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "context_size": self._llm.n_ctx(),
            "threads": self.threads,
            "model_type": self._model_type,
            "chat_template": self._template,
            "base_model": self.base_model,
            "path": self._spec.path,
            "vision": self._vision is not None,
            "mmproj": str(self._vision.path) if self._vision else None,
            "preempts": self.preempts,
        }

    def listen(self, flag: Any) -> None:
        """The flag (a shared ctypes bool) the pool raises when a person's turn needs this
        worker: the API reply's step in flight then stops (core.engines.llama_abort)."""
        self._abort.listen(flag)

    def submit(self, request: GenerationRequest) -> None:
        request.sampling.validate()
        self._queue.append(request)

    def cancel(self, request_id: str) -> None:
        if self._active and self._active.request.request_id == request_id:
            active, self._active = self._active, None
            active.stream.close()
            active.completion_tokens = self._sampled(active)
            self._out.append((request_id, [active.usage(), Done("cancelled")]))
            self._order.finished(request_id)
            return
        aside = self._order.take_aside(request_id)
        if aside is not None:
            held, snap = aside.state
            held.completion_tokens = len(snap.tokens) - len(held.kv_prompt)
            self._out.append((request_id, [held.usage(), Done("cancelled")]))
            return
        for request in list(self._queue):
            if request.request_id == request_id:
                self._queue.remove(request)
                self._out.append((request_id, [Done("cancelled")]))

    def has_work(self) -> bool:
        return bool(self._out or self._active or self._order
                     or (self._kv is not None and self._kv.busy()))  # kv-disk hook

    def step(self) -> list[tuple[str, list[Event]]]:
        out, self._out = self._out, []
        if self._active is not None and self._order.should_yield(self._active.request):
            self._set_aside(self._active)
        if self._active is None and self._order:
            request, aside = self._order.next() or (None, None)
            if aside is not None:
                out.append(self._resume(*aside))
                return out
            assert request is not None
            try:
                started = self._start(request)
            except _PromptTooLong as exc:
                started = request.request_id, [Error("CONTEXT_OVERFLOW", str(exc)), Done("error")]
            except Exception as exc:  # one request's input must never take the worker down
                started = request.request_id, [
                    Error("BAD_REQUEST", f"This request could not be started: {exc}"), Done("error")]
            if started is not None:
                out.append(started)
                return out
        if self._active is not None:
            out.append(self._advance(self._active))
        elif self._kv is not None and not self._order:
            self._kv.idle_step()  # kv-disk hook: the finished reply's state, off its path
        return out

    def _start(self, request: GenerationRequest) -> tuple[str, list[Event]] | None:
        rid = request.request_id
        s = request.sampling
        raw = request.prompt is not None  # /v1/completions: text as is, no template
        penalty = s.repetition_penalty if raw else self._repetition_penalty(s)
        family = detect_family(self._template, self._model_type)
        generic = forces_generic_call(request, family, self.base_model)
        try:
            options = completion_options(s, self._llm.n_vocab(), penalty)
            if request.tools:  # core.engines.tool_grammar
                options.update(self._tool_options(request, family, generic))
        except Unsupported as exc:
            return rid, [Error("UNSUPPORTED", str(exc)), Done("error")]
        except ValueError as exc:
            return rid, [Error("BAD_REQUEST", str(exc)), Done("error")]
        # llama.cpp reads the penalties' window from here when it builds the sampler.
        self._llm.last_n_tokens_size = penalty_window(s, penalty)
        messages, images = request.messages, image_paths(request.messages)
        if generic:
            messages = generic_call_messages(messages, request.tools, request.tool_name)
        if images and self._vision is None:
            return rid, [Error("UNSUPPORTED", "This model cannot see images: it has no vision "
                               "projector (an mmproj GGUF beside the model file)."), Done("error")]
        if images:
            messages = tuple(with_markers(messages))
        elif self._vision is not None:
            self._vision.forget(self._llm)  # no image's positions reused by a text prompt
        prefill: Prefill | None = None
        if raw:  # (no messages, so no images)
            # Markup in a raw prompt is meant (special=True); BOS unless it starts with it.
            bos = self._token_text(self._llm.token_bos())
            text, special, stop = request.prompt or "", True, []
            add_bos = not (bos and text.startswith(bos))
        elif self._base is not None:
            # special=False: a "<start_of_turn>" typed by the user stays text
            text, add_bos, special = self._base.render(messages) + request.reply_prefix, True, False
            stop = list(self._base.stops)
        else:
            try:
                rendered = self._formatter(messages=list(messages),
                                           tools=list(request.tools) or None,
                                           **template_switches(self._template, request.thinking))
            except Exception as exc:
                return rid, [Error("BAD_REQUEST", f"The chat template failed: {exc}"),
                             Done("error")]
            text, add_bos, special = rendered.prompt + request.reply_prefix, not rendered.added_special, True
            stop = (rendered.stop if isinstance(rendered.stop, list)
                    else [rendered.stop] if rendered.stop else [])
        if images:
            try:
                prefill = self._prefill(text, images, add_bos=add_bos, special=special)
            except ImageError as exc:
                code = "CONTEXT_OVERFLOW" if isinstance(exc, ContextOverflow) else "BAD_REQUEST"
                return rid, [Error(code, str(exc)), Done("error")]
            tokens = prefill.tokens
        else:
            tokens = self._tokenize(text, add_bos=add_bos, special=special)
        budget = self._llm.n_ctx() - len(tokens)
        if budget < 1:
            return rid, [
                Error(
                    "CONTEXT_OVERFLOW",
                    f"The conversation is {len(tokens)} tokens, more than this model's "
                    f"context of {self._llm.n_ctx()}. Start a new chat or raise the context size.",
                ),
                Done("error"),
            ]
        cached = prefill.cached if prefill else _common_prefix(
            self._llm._input_ids[: self._llm.n_tokens].tolist(), tokens)
        if prefill is None and self._kv is not None:  # kv-disk hook: a stored state covering more
            cached = self._kv.lookup(tokens, cached)
        if prefill is None:
            cached = _front_checked(self._llm, cached)
        s = request.sampling
        stop = [x for x in (*s.stop, *stop, *(() if raw else self._turn_stops)) if x]
        if s.json_schema is not None or generic:  # the grammar alone ends a constrained reply
            stop = [x for x in s.stop if x]
        if s.logprobs:
            stream = logprob_stream(
                self._llm, tokens, top=s.top_logprobs, max_tokens=min(s.max_tokens, budget),
                stop=[], sampling=dict(options, temp=s.temperature, top_p=s.top_p,
                                         top_k=s.top_k, min_p=s.min_p, repeat_penalty=penalty))
            restart = None  # (its log-probabilities' recorder would start over)
        else:
            lookup = (self.speculative and speculable(s) and not s.logit_bias and prefill is None
                      and "logits_processor" not in options)  # core.engines.llama_lookup

            window = self._llm.last_n_tokens_size

            def restart(prompt: list[int], limit: int, reply: list[int]) -> Iterator[dict]:
                self._llm.last_n_tokens_size = window  # another request may have set its own
                self._tap.prime(reply if not lookup else [])  # the penalties' history
                if lookup:
                    self.acceptance = Acceptance()
                    return lookup_stream(
                        self._llm, prompt, max_tokens=limit, stop=[],
                        penalties=Penalties(self._llm.last_n_tokens_size, penalty,
                                            s.frequency_penalty, s.presence_penalty),
                        acceptance=self.acceptance, max_rows=self.exact_rows, history=reply)
                return iter(self._llm.create_completion(
                    prompt=prompt, max_tokens=limit, temperature=s.temperature, top_p=s.top_p,
                    top_k=s.top_k, min_p=s.min_p, repeat_penalty=penalty, stream=True,
                    **options))

            stream = restart(tokens, min(s.max_tokens, budget), [])
        self._active = _Active(request, iter(stream), len(tokens), min(cached, len(tokens)), stop)
        self._active.limit = min(s.max_tokens, budget)
        self._active.stream_prompt = tokens
        # A reply under a grammar, with images or log-probabilities is never set aside:
        # its sampler's state could not be carried over.
        if prefill is None and options.get("grammar") is None and "logits_processor" not in options:
            self._active.restart = restart
        if prefill is not None:  # the images were encoded above: their time is the TTFT's
            self._active.started = prefill.started
        else:  # cancellable between chunks (core.engines.llama_prefill)
            self._active.prefill = ChunkedPrefill.plan(self._llm, tokens)
        # "Assistant:" leaves a space, the next "\nUser:" a newline: both trimmed
        self._active.tail.trim_start = self._active.tail.trim_end = self._base is not None and not raw
        if request.reply_prefix:  # a continued reply: its leading space joins two words
            self._active.tail.trim_start = False
        if not raw and self._base is None and not images:  # kv-disk hook
            self._active.kv_text = text
        self._active.kv_prompt = tokens
        if request.report_prompt:  # counted before the prefill, in a step of its own
            return rid, [PromptRead(len(tokens), self._active.cached)]
        return None

    def _prefill(self, text: str, images: list[str], *, add_bos: bool,
                 special: bool) -> Prefill:
        """A prompt with images, evaluated into the context by the projector (the length
        check of _tokenize first: libmtmd tokenises the text too)."""
        assert self._vision is not None
        n_ctx = self._llm.n_ctx()
        if len(text) > n_ctx * MAX_CHARS_PER_TOKEN:
            raise ContextOverflow(
                f"The conversation is {len(text):,} characters, more than this model's context "
                f"of {n_ctx} tokens can hold. Start a new chat or raise the context size.")
        return self._vision.prefill(self._llm, text, images, add_bos=add_bos, special=special)

    def _tool_options(self, request: GenerationRequest, family: str,
                      generic: bool) -> dict[str, Any]:
        """A logits processor that holds an opened tool call to the offered tools'
        schemas (none under a JSON response_format, which holds the whole reply);
        `generic`: the whole reply is one bare JSON call (tool_grammar.GENERIC)."""
        if request.sampling.json_schema is not None:
            return {}
        if self._tool_grammars is None:
            self._tool_grammars = llama_tool_grammars(self._llm, family)
        guide = self._tool_grammars.guide(request.tools, request.tool_choice, request.tool_name,
                                          generic=generic)
        if guide is None:
            return {}
        return {"logits_processor": LlamaProcessors([LlamaToolProcessor(guide, self._llm.n_vocab())])}

    def _tokenize(self, text: str, *, add_bos: bool, special: bool) -> list[int]:
        """The prompt's tokens. Text longer than the context could hold however it
        tokenises is refused first (tokenising megabytes takes tens of seconds); lone
        surrogates, which UTF-8 cannot carry, become U+FFFD instead of an exception."""
        n_ctx = self._llm.n_ctx()
        if len(text) > n_ctx * MAX_CHARS_PER_TOKEN:
            raise _PromptTooLong(
                f"The conversation is {len(text):,} characters, more than this model's context "
                f"of {n_ctx} tokens can hold. Start a new chat or raise the context size.")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            data = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
        return self._llm.tokenize(data, add_bos=add_bos, special=special)

    def _sampled(self, active: _Active) -> int:
        """Tokens sampled for the active request: llama.cpp evaluates each sampled token
        before sampling the next, so all but the last are in its context. Counting stream
        chunks instead counted the final, empty one too (max_tokens + 1 at length)."""
        if active.first_token_at is None:
            return 0
        return max(1, self._llm.n_tokens - active.prompt_tokens + 1)

    def _advance(self, active: _Active) -> tuple[str, list[Event]]:
        rid = active.request.request_id
        events: list[Event] = []
        self._abort.arm(self._can_redo(active))
        try:
            if active.prefill is not None:  # one chunk per step: a cancel is heard between
                if active.prefill.step():
                    active.prefill = None
                return rid, events
            chunk = next(active.stream)
        except StopIteration:
            chunk = None
        except Exception as exc:  # llama.cpp decode failure
            if self._abort.fired:  # cut short for a person's turn: done again next step
                return rid, self._redo(active)
            self._active = None
            return rid, [Error("INTERNAL", f"Generation failed: {exc}"), Done("error")]
        finally:
            self._abort.disarm()
        active.fresh = False
        if chunk is not None:
            choice = chunk["choices"][0]
            text = choice.get("text") or ""
            if "entry" in choice:  # a logprobs request (llama_sampling.logprob_stream)
                events.append(Logprobs((choice["entry"],)))
            if active.first_token_at is None:
                active.first_token_at = time.perf_counter()
            active.completion_tokens += 1
            active.last_token = choice.get("token", self._tap.last)
            shown, stopped = active.tail.feed(text)
            if shown:
                events.append(TextDelta(shown))
                active.reply += shown
            reason = choice.get("finish_reason")
            if stopped:
                active.stream.close()
                reason = "stop"
            if reason is None:
                return rid, events
        else:
            reason = "stop"
        tail = active.tail.end(cut=reason == "length")
        if tail:
            events.append(TextDelta(tail))
        active.completion_tokens = self._sampled(active)
        events += [active.usage(), Done("length", None) if reason == "length"
                   else Done("stop", active.tail.matched)]
        self._active = None
        self._order.finished(rid)
        if self._kv is not None:  # kv-disk hook: kept for the next idle step
            self._kv.finished(active.request, active.kv_text, active.kv_prompt, active.reply + tail)
        return rid, events

    def _can_redo(self, active: _Active) -> bool:
        """Whether the coming step may be cut short (core.engines.llama_abort): an API
        reply or work beside a conversation that could be set aside, at a point where a new
        stream over its tokens goes on exactly (a prompt chunk, a stream not yet yielded, or
        a reply whose text so far is whole characters). Not a seeded sampled reply: a new
        stream would start its random sequence again, and its client would see another reply."""
        s = active.request.sampling
        if (not self._abort.available or active.restart is None or active.request.interactive
                or (s.seed is not None and s.temperature > 0)):
            return False
        return active.prefill is not None or active.fresh or at_token_boundary(
            self._llm, len(active.kv_prompt), active.last_token)

    def _redo(self, active: _Active) -> list[Event]:
        """The step was cut short: llama.cpp dropped what it wrote, so the context holds
        the reply but its last sampled token, as before the step. A chunk of prompt is fed
        again next step (its place did not move); a stream is started again over the same
        tokens, whose prefix reuse feeds just what the cut step fed."""
        import llama_cpp

        llm = self._llm
        llama_cpp.llama_memory_seq_rm(_memory(llm), -1,
                                      llm.n_tokens, -1)  # llama.cpp did: said, not assumed
        if active.prefill is not None:
            return []
        assert active.restart is not None
        if active.fresh:
            tokens = active.stream_prompt
        else:
            tokens = [*llm.input_ids[:llm.n_tokens].tolist(), int(active.last_token or 0)]
        reply = tokens[len(active.kv_prompt):]
        try:
            active.stream = iter(active.restart(tokens, active.limit - len(reply), reply))
        except Exception as exc:  # noqa: BLE001 - one reply's failure never takes the worker
            self._active = None
            self._order.finished(active.request.request_id)
            return [Error("INTERNAL", f"Generation failed: {exc}"), Done("error")]
        active.stream_prompt, active.fresh = tokens, True
        return []

    def _set_aside(self, active: _Active) -> None:
        """A higher-ranked request waits: keep the running reply's state and let it go
        first, when the reply can go on later (core.engines.llama_pause); else it runs on."""
        if active.restart is None:
            return
        reply = self._sampled(active)
        if active.first_token_at is None:  # not started yet: it simply waits again
            snap = Snapshot(list(active.kv_prompt[:-1]), active.kv_prompt[-1], None)
        elif active.fresh:  # its stream (resumed, or a cut step redone) has not fed yet
            got = take(self._llm, active.kv_prompt, active.stream_prompt[-1])
            snap = got if got is not None and got.tokens == active.stream_prompt else Snapshot(
                active.stream_prompt[:-1], active.stream_prompt[-1], None)
        elif reply >= active.limit or not at_token_boundary(
                self._llm, len(active.kv_prompt), active.last_token):
            return
        else:
            got = take(self._llm, active.kv_prompt, int(active.last_token or 0))
            if got is None:
                return
            snap = got
        active.stream.close()
        self._active = None
        self._order.set_aside(active.request, (active, snap))

    def _resume(self, active: _Active, snap: Snapshot) -> tuple[str, list[Event]]:
        """Go on with a reply set aside: its KV cells back, a stream over its prompt and
        reply so far; its client sees one stream (same text pieces, usage of the whole)."""
        rid = active.request.request_id
        assert active.restart is not None
        reply = snap.tokens[len(active.kv_prompt):]
        try:
            _front_checked(self._llm, restore(self._llm, snap))
            if active.first_token_at is None:  # set aside mid-prefill: the context changed
                active.prefill = ChunkedPrefill.plan(self._llm, active.kv_prompt)
            active.stream = iter(active.restart(snap.tokens, active.limit - len(reply), reply))
        except Exception as exc:  # noqa: BLE001 - one reply's failure never takes the worker
            self._order.finished(rid)
            return rid, [Error("INTERNAL", f"Generation failed: {exc}"), Done("error")]
        active.stream_prompt, active.fresh = snap.tokens, True
        self._active = active
        return rid, []

    def close(self) -> None:
        vision = getattr(self, "_vision", None)
        if vision is not None:
            vision.close()  # before the model it was loaded against
        kv = getattr(self, "_kv", None)
        if kv is not None:  # kv-disk hook: the last reply's state is written first
            kv.close()
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.close()


def _memory(llm: Any) -> Any:
    """The context's KV memory handle, as llama.cpp's memory calls take it."""
    import llama_cpp

    return llama_cpp.llama_get_memory(llm._ctx.ctx)


def _front_checked(llm: Any, shared: int) -> int:
    """The tokens of the context a new stream may reuse: `shared`, or 0 when the cache has
    lost its first cells and the stream would keep fewer tokens than it holds. A stored
    state (core.engines.kv_llama) brings back only a sliding window's cells for the SWA
    layers (Gemma 3: 512), so once the context is cut back below that window, those layers
    miss the prompt's start: an API reply set aside before its first token over such a
    state resumed as another text ("What is the capital of Japan"). Emptied, it is
    prefilled whole again."""
    import llama_cpp

    if shared >= llm.n_tokens:
        return shared
    if int(llama_cpp.llama_memory_seq_pos_min(_memory(llm), 0)) > 0:
        llm.n_tokens = 0
        return 0
    return shared


class _PromptTooLong(ValueError):
    """A prompt refused before tokenising (see LlamaCppEngine._tokenize)."""


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
