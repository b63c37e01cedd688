"""The MLX engine: continuous batching over mlx_lm for every session of one model.

Why not just mlx_lm's BatchGenerator: a lone user would pay for batching (its batched KV
cache makes single-stream decode markedly slower than mlx_lm's own generate_step), and a
conversation's second turn would re-prefill its whole history. So this engine runs:

- one request alone on a plain KV cache with generate_step's pipelining (the next token's
  graph is queued with async_eval before the current one is read back);
- two or more through BatchGenerator (a running single request joins the batch with its
  cache and pending token, nothing is recomputed), decoding with a lean step that skips
  the per-row log-probability split the engine never reads;
- a PrefixCache of finished requests' KV caches, so a new turn prefills only new tokens;
- when a batch drains back to one request, that request returns to the single path.

Stop strings, streaming detokenisation and Usage are handled here; reasoning and tool
markup are left in the raw text for core.parsing (the worker runs StreamParser on top).
"""

from __future__ import annotations

import copy
import gc
import os
import pkgutil
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# On CUDA, MLX hands attention to cuDNN, which builds a new graph (compiling kernels) for
# every new (batch, query length, cache buffer length) it meets: on the GPU machine that is
# a stall of up to seconds the first time a prompt length, a cached turn's suffix or a
# batch size at a new 256-token cache step comes along, which no warm-up can cover. MLX's
# own attention kernels have no per-shape cost. Set before MLX runs anything; an
# explicit setting in the environment wins.
os.environ.setdefault("MLX_CUDA_USE_CUDNN_SDPA", "0")

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import BatchGenerator, GenerationBatch, generation_stream  # noqa: E402
from mlx_lm.models.cache import (  # noqa: E402
    BatchKVCache,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from core.engines.base import (  # noqa: E402
    EngineLoadError,
    GenerationRequest,
    ModelSpec,
    SamplingParams,
    template_switches,
)
from core.engines.base_prompt import base_format, effective_repetition_penalty  # noqa: E402
from core.engines.grammar import Grammars, MaskedProcessor, mask_rows  # noqa: E402
from core.engines.kv_mlx import MlxKvKeeper  # noqa: E402
from core.engines.prefill_order import (  # noqa: E402
    FREE_PADDED_TOKENS,
    PADDING_SLACK,
    Waiting,
    next_group,
    padded_tokens,
)
from core.engines.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache  # noqa: E402
from core.engines.reply_tail import ReplyTail  # noqa: E402
from core.engines.sampling import (  # noqa: E402
    LogprobRecorder,
    SamplerCache,
    greedy,
    logits_processors,
    vocab_size,
)
from core.engines.select import (  # noqa: E402
    SelectionError,
    check_mlx_dir,
    check_safetensors,
    json_object,
)
from core.engines.speculative import (  # noqa: E402
    Acceptance,
    NgramDrafter,
    accepted,
    speculable,
)
from core.engines.tool_grammar import (  # noqa: E402
    ToolGrammars,
    forces_generic_call,
    generic_call_messages,
)
from core.engines.tool_rows import ToolCallProcessor  # noqa: E402
from core.events import Done, Error, Event, Logprobs, TextDelta, Usage  # noqa: E402
from core.parsing.detect import detect_family  # noqa: E402

# Modules of mlx_lm.models that are building blocks, not architectures.
_NOT_ARCHITECTURES = frozenset(
    {
        "activations",
        "base",
        "bitlinear_layers",
        "cache",
        "gated_delta",
        "mla",
        "pipeline",
        "rope_utils",
        "ssm",
        "switch_layers",
    }
)


def supported_architectures() -> list[str]:
    """Every config model_type mlx_lm can build, read from its models package."""
    import mlx_lm.models
    from mlx_lm.utils import MODEL_REMAPPING

    names = {
        m.name
        for m in pkgutil.iter_modules(mlx_lm.models.__path__)
        if m.name not in _NOT_ARCHITECTURES
    }
    names |= {k for k, v in MODEL_REMAPPING.items() if v in names}
    return sorted(names)


def check_architecture(config: dict[str, Any]) -> str:
    """Return the model_type or raise EngineLoadError(UNSUPPORTED) before loading."""
    model_type = str(config.get("model_type", ""))
    supported = supported_architectures()
    if model_type not in supported:
        raise EngineLoadError(
            "UNSUPPORTED",
            f"Model architecture '{model_type}' is not supported by the MLX engine. "
            f"Supported: [{', '.join(supported)}]",
        )
    return model_type


@dataclass
class _Request:
    """One request's state from admission to Done."""

    req: GenerationRequest
    prompt: list[int]
    max_tokens: int
    sampler: Any
    processors: list[Any]
    detok: Any
    tail: ReplyTail  # stops, a base model's leading space (core.engines.reply_tail)
    submitted: float
    cached: int = 0
    generated: list[int] = field(default_factory=list)
    first_token_at: float | None = None
    last_token_at: float | None = None
    uid: int | None = None
    error: Error | None = None
    new_tokens: int | None = None  # uncached prompt tokens when first queued for prefill
    text: str | None = None  # the rendered prompt (None for raw-token requests)
    raw: str = ""  # everything generated, stop strings and end-of-turn included
    marks: tuple[tuple[int, int], ...] = ()  # exact text/token boundaries in the prompt
    spec: Acceptance | None = None  # prompt-lookup drafting (alone and greedy only)
    draft_cache: list[Any] | None = None  # the draft model's KV (when one is loaded) ...
    draft_fed: int = 0  # ... holding this many tokens of prompt + generated
    drafter: NgramDrafter | None = None


@dataclass
class _FinishedRows:
    """Requests that left the batch on one step, with their rows of every KV layer."""

    acts: list[_Request]
    tokens: list[list[int]]
    kv: list[tuple[mx.array, mx.array, int]]  # keys, values, end column


@dataclass
class _Single:
    """The request decoding alone, generate_step style: `y` is queued, not yet read."""

    act: _Request
    cache: list[Any]
    y: mx.array
    context: mx.array | None
    emitted: bool = False  # y was read and handed out, but not yet fed to the model


class _LeanGenerationBatch(GenerationBatch):
    """GenerationBatch whose step does not split log-probabilities per row.

    The engine reads only tokens; splitting a (B, vocab) array into B lazy rows and
    evaluating them every step is pure overhead at large batch sizes. Its `next` returns
    bare (uid, token) pairs: the engine itself decides when a request ends (end-of-turn
    tokens, stop strings, max_tokens) and removes it, so the per-row stop matchers,
    counters, Response objects and eager cache extraction of GenerationBatch.next are
    skipped too.
    """

    def next(self) -> list[tuple[int, int]]:  # type: ignore[override]
        if not self.uids:
            return []
        tokens, _ = self._step()
        return list(zip(self.uids, tokens, strict=True))

    def filter(self, keep: list[int]) -> None:
        """Keep rows `keep`, without reading the cache back to the host.

        BatchKVCache.filter reads every layer's left padding (a host sync per layer, the
        first waiting for the step in flight) to drop padding columns no row needs; that
        made the step that removed finished rows several times slower than the rest.
        Here the common padding is worked out from the rows' token counts, which the
        batch already holds on the host (every row ends at the cache's write index).
        """
        layers = self.prompt_cache
        if not (keep and layers and all(type(c) is BatchKVCache for c in layers)):
            super().filter(keep)
            return
        longest = max(len(self.tokens[i]) for i in keep)
        idx = mx.array(keep)
        for c in layers:
            if c.keys is not None:
                c.keys = c.keys[idx]
                c.values = c.values[idx]
            c.offset = c.offset[idx]
            c.left_padding = c.left_padding[idx]
            # One column of margin: a count that was off by one would otherwise cut a
            # real position; a spare padded column costs nothing.
            shift = c._idx - longest - 1
            if shift > 0 and c.keys is not None:
                c.keys = c.keys[..., shift:, :]
                c.values = c.values[..., shift:, :]
                c._idx -= shift
                c.left_padding = c.left_padding - shift
        self.prompt_cache = []  # GenerationBatch.filter would filter the layers again
        try:
            super().filter(keep)
        finally:
            self.prompt_cache = layers

    def _step(self) -> tuple[list[int], list[Any]]:
        self._current_tokens = self._next_tokens
        inputs = self._current_tokens
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        contexts = []
        tokens: list[int] | None = None
        if any(self.logits_processors):
            logits, contexts, grammar_rows = self._process_rows(inputs, logits)
            if grammar_rows:
                # The forward pass runs while the host computes the masks, which need
                # this step's input tokens (the previous step's, read back here).
                mx.async_eval(logits)
                tokens = inputs.tolist()
                logits = mask_rows(logits, grammar_rows, tokens)
        samplers = self.samplers or [self.fallback_sampler] * len(self.uids)
        first = samplers[0] if samplers else self.fallback_sampler
        shared = all(s is first for s in samplers)
        if shared and first is greedy:  # see greedy: no normalisation needed
            sampled = greedy(logits)
        else:
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            if shared:
                sampled = first(logprobs)
            else:
                sampled = mx.concatenate(
                    [s(logprobs[e : e + 1]) for e, s in enumerate(samplers)], axis=0
                )
        self._next_tokens = sampled
        self._next_logprobs = [None] * len(self.uids)
        mx.async_eval(sampled, contexts)
        if tokens is None:
            tokens = inputs.tolist()
        for seq, tok in zip(self.tokens, tokens, strict=True):
            seq.append(tok)
        return tokens, self._next_logprobs

    def _process_rows(
        self, inputs: mx.array, logits: mx.array
    ) -> tuple[mx.array, list[mx.array], list[tuple[int, MaskedProcessor]]]:
        """Run the per-row processors (penalties, bias) on the rows that have them, and
        collect the rows whose last processor is a grammar: those are masked together
        (core.engines.grammar.mask_rows), not row by row. Rows without processors are
        not touched, and a batch with only grammars is neither split nor joined."""
        contexts: list[mx.array] = []
        grammar_rows: list[tuple[int, MaskedProcessor]] = []
        rows: list[mx.array] | None = None
        for e, processors in enumerate(self.logits_processors):
            if not processors:
                continue
            if isinstance(processors[-1], MaskedProcessor):
                grammar_rows.append((e, processors[-1]))
                processors = processors[:-1]
                if not processors:
                    continue
            if rows is None:
                rows = [logits[i : i + 1] for i in range(logits.shape[0])]
            context = self._token_context[e].update_and_fetch(inputs[e : e + 1])
            contexts.append(context)
            row = rows[e]
            for processor in processors:
                row = processor(context, row)
            rows[e] = row
        if rows is not None:
            logits = mx.concatenate(rows, axis=0)
        return logits, contexts, grammar_rows


class MlxEngine:
    """Engine protocol over mlx_lm; see the module docstring for the design."""

    name = "mlx"

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.max_concurrency = int(spec.option("max_concurrency", 32))
        self.context_size = int(spec.context_size)
        self._prefill_step = int(spec.option("prefill_step_size", 2048))
        # "shortest": waiting prompts prefill shortest first in groups of near-equal
        # length (core.engines.prefill_order); "fifo": all at once in arrival order.
        self._prefill_order = str(spec.option("prefill_order", "shortest"))
        if self._prefill_order not in ("shortest", "fifo"):
            raise EngineLoadError(
                "UNSUPPORTED",
                f"prefill_order must be 'shortest' or 'fifo', not {self._prefill_order!r}.",
            )
        path = Path(spec.path)
        self._model, self._tokenizer, self._config = _load(path)
        self.model_type = str(self._config.get("model_type"))
        self._eos = set(self._tokenizer.eos_token_ids)
        template = getattr(self._tokenizer, "chat_template", None)
        self._template: str | None = template if isinstance(template, str) else None
        # No chat template: a base model, prompted as a transcript (core.engines.base_prompt)
        self.base_model = self._template is None
        self._base = base_format(spec.option("base_format")) if self.base_model else None
        self._prefix = PrefixCache(int(spec.option("prefix_cache_bytes", DEFAULT_MAX_BYTES)))
        self._pending: deque[_Request] = deque()
        self._cancelled: set[str] = set()
        self._single: _Single | None = None
        self._batch: dict[int, _Request] = {}
        self._idle_rows: set[int] = set()  # batch rows of finished requests (see _retire)
        self._unsaved: deque[_FinishedRows] = deque()
        self._samplers = SamplerCache()
        self._vocab_size = vocab_size(self._config, self._tokenizer)
        self._grammars = Grammars(self._tokenizer, self._vocab_size, sorted(self._eos))
        self._tool_grammars = self._new_tool_grammars()
        self._token_texts: dict[int, tuple[str, list[int]]] = {}  # for logprobs
        self._stream = generation_stream
        self._steps = 0
        self.eager_first_token = True
        self.speculative = bool(spec.option("speculative", True))  # core.engines.speculative
        self.acceptance: Acceptance | None = None  # the last speculating request's record
        self._draft_model = self._load_draft(spec.option("draft_model"))
        self._bg = self._new_batch_generator()
        # Prefill shapes cost a compilation the first time only on a GPU (CUDA, Metal).
        on_gpu = mx.default_device().type == mx.DeviceType.gpu
        self._warmup_prefill = bool(spec.option("warmup_prefill", on_gpu))
        # On a GPU a prompt is prefilled in a few fixed shapes (see _prefill_in_buckets).
        self._bucketed = bool(spec.option("bucketed_prefill", on_gpu))
        device = "gpu" if on_gpu else "cpu"  # how prompts share prefill passes
        self._group_tokens = int(spec.option("prefill_group_tokens", FREE_PADDED_TOKENS[device]))
        self._group_slack = float(spec.option("prefill_group_slack", PADDING_SLACK[device]))
        sizes = spec.option("warmup_batch_sizes")
        if sizes is None:
            sizes = _default_warmup_sizes(self.max_concurrency)
        self._kv: MlxKvKeeper | None = None
        self.warmup(tuple(sizes))
        # kv-disk hook (issue 33): caches on disk across restarts (core.engines.kv_mlx)
        self._kv = MlxKvKeeper.open(
            spec.option("kv_disk_gb"), path, model=self._model, tokenizer=self._tokenizer,
            family=self._tool_grammars.family, stream=self._stream, eos=self._eos,
            render=lambda msgs, tools, thinking: self.render_text(
                GenerationRequest("", tuple(msgs), tools=tools, thinking=thinking)),
            remember=self._prefix.store)

    # -- Engine protocol -------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        self._pending.append(self._admit(request))

    def cancel(self, request_id: str) -> None:
        self._cancelled.add(request_id)

    def has_work(self) -> bool:
        # Finished requests' caches still to be split and indexed count as work: the worker
        # then does it while idle (a few per step), not the next request's admission
        # (after a 64-request burst that was 50 entries, 3-20 ms on a lone turn's TTFT).
        return bool(self._pending or self._single or self._batch or self._cancelled
                    or self._unsaved or self._prefix.pending
                    or (self._kv is not None and self._kv.busy()))  # kv-disk hook

    def step(self) -> list[tuple[str, list[Event]]]:
        out: dict[str, list[Event]] = {}
        if self._cancelled:
            self._apply_cancels(out)
        if self._pending:
            while self._unsaved:  # a new prompt may extend one of them
                self._save_rows(self._unsaved.popleft())
            self._schedule(out)
        if self._single is not None:
            self._step_single(out)
        elif self._batch:
            self._step_batch(out)
            if len(self._batch) == 1 and not self._pending:
                self._batch_to_single()
        if self._unsaved:
            self._save_rows(self._unsaved.popleft())
        elif self._prefix.pending:
            self._prefix.settle(_SETTLE_PER_STEP)
        elif self._kv is not None and not (self._pending or self._single or self._batch):
            self._kv.idle_step()  # kv-disk hook: a finished reply's next-turn cache
        self._steps += 1
        return [(rid, events) for rid, events in out.items() if events]

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "path": self.spec.path,
            "model_type": self.model_type,
            "context_size": self.context_size,
            "chat_template": self._template,
            "base_model": self.base_model,
            "max_concurrency": self.max_concurrency,
            "prefix_cache_bytes": self._prefix.nbytes,
        }

    def close(self) -> None:
        # No gc.unfreeze() here: freezing is process-wide and the process owner (the UI
        # freezes its own start-up objects too) decides when to undo it.
        self._pending.clear()
        self._single = None
        self._batch.clear()
        self._idle_rows.clear()
        self._unsaved.clear()
        self._prefix.clear()
        self._bg.close()
        if self._kv is not None:  # kv-disk hook: queued writes finish first
            self._kv.close()

    # -- Admission -------------------------------------------------------------------

    def render_text(self, request: GenerationRequest) -> str:
        """The request's messages under the model's chat template (tools when it takes them);
        a raw prompt (/v1/completions) as it is."""
        if request.prompt is not None:
            return request.prompt
        messages = [dict(m) for m in request.messages]
        if self._base is not None:
            return self._base.render(messages)
        kwargs: dict[str, Any] = template_switches(self._template, request.thinking)
        if request.tools and "tools" in self._template:
            kwargs["tools"] = [dict(t) for t in request.tools]
        return self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        )

    def render_prompt(self, request: GenerationRequest) -> list[int]:
        """Token ids of the request, reusing a cached conversation's exact ids for its history.

        Re-tokenising a model's own reply can split it differently from how it was
        generated, which would end prefix reuse at the first differing token; so where the
        rendered text starts with a cached turn's text, that turn's token ids are kept and
        only the new text is tokenised.
        """
        text = self.render_text(request)
        return self._tokens_for(text, raw=request.prompt is not None)[0]

    def _tokens_for(self, text: str, raw: bool = False) -> tuple[list[int], tuple[tuple[int, int], ...]]:
        """The prompt's ids, and the exact (chars, tokens) boundaries they keep from the
        cache (the ends of earlier prompts and replies), which its own entry inherits.

        A chat template writes its own BOS; a base transcript and a raw prompt get the
        tokenizer's, unless the raw text already starts with it (no doubled BOS)."""
        known = self._prefix.tokens_for(text)
        if known is None and self._kv is not None:  # kv-disk hook: ids a stored file keeps
            known = self._kv.tokens_for(text)
        if known is None:
            special = self._template is None or raw
            bos = getattr(self._tokenizer, "bos_token", None)
            if raw and isinstance(bos, str) and bos and text.startswith(bos):
                special = False
            return list(self._tokenizer.encode(text, add_special_tokens=special)), ()
        ids, chars, marks = known
        return ids + list(self._tokenizer.encode(text[chars:], add_special_tokens=False)), marks

    def _admit(self, request: GenerationRequest, prompt: list[int] | None = None) -> _Request:
        submitted = time.perf_counter()  # TTFT includes rendering and tokenising
        sp = request.sampling
        error: Error | None = None
        text: str | None = None
        processors: list[Any] = []
        marks: tuple[tuple[int, int], ...] = ()
        base = self._base if request.prompt is None else None  # raw text: no transcript stops
        generic = forces_generic_call(request, self._tool_grammars.family, self.base_model)
        if generic:  # the reply is one bare JSON call: say so, and list the tools
            request = replace(request, messages=generic_call_messages(
                request.messages, request.tools, request.tool_name))
        try:
            sp.validate()
            processors = self._logits_processors(sp, raw=request.prompt is not None)
            processors += self._tool_processors(request, generic)
            if prompt is None:
                text = self.render_text(request)
                prompt, marks = self._tokens_for(text, raw=request.prompt is not None)
        except (ValueError, TypeError) as exc:
            error = Error("BAD_REQUEST", str(exc))
            prompt = []
        act = _Request(
            req=request,
            prompt=prompt,
            max_tokens=min(sp.max_tokens, max(self.context_size - len(prompt), 0)),
            sampler=self._sampler(sp),
            processors=processors,
            detok=_fresh_detokenizer(self._tokenizer, keep_leading_space=request.prompt is not None),
            # a constrained reply ends where its grammar accepts, never at a turn marker
            tail=ReplyTail((*sp.stop, *self._base.stops)
                           if base and sp.json_schema is None and not generic else sp.stop,
                           trim_start=base is not None),
            submitted=submitted,
            text=text,
            marks=marks,
        )
        if error is None and not prompt:
            error = Error("BAD_REQUEST", "The request rendered to an empty prompt.")
        if error is None and len(prompt) >= self.context_size:
            error = Error(
                "CONTEXT_OVERFLOW",
                f"The conversation is {len(prompt)} tokens, over this model's context of "
                f"{self.context_size}; start a new conversation or summarise this one.",
            )
        act.error = error
        return act

    def _sampler(self, sp: SamplingParams) -> Any:
        # One sampler object per plain setting, so a batch that shares settings samples in
        # one call; seeded and logprobs requests get their own (core.engines.sampling).
        return self._samplers.sampler_for(sp)

    def _logits_processors(self, sp: SamplingParams, raw: bool = False) -> list[Any]:
        # A raw prompt gets only the penalties it asks for (no base-model default).
        penalty = effective_repetition_penalty(sp, self.base_model and not raw)
        processors = logits_processors(sp, self._vocab_size, penalty)
        if sp.json_schema is not None:  # last: nothing may lift its mask
            processors.append(self._grammars.processor(sp.json_schema))
        return processors

    def _new_tool_grammars(self) -> ToolGrammars:
        """Tool-call grammars for this model's call format (core.engines.tool_grammar)."""
        tokenizer, vocab = self._tokenizer, self._vocab_size

        def make_tokenizer() -> Any:  # the one response formats use too
            return self._grammars.ll_tokenizer("tools")

        def single_token(text: str) -> int | None:
            ids = tokenizer.encode(text, add_special_tokens=False)
            return ids[0] if len(ids) == 1 else None

        family = detect_family(self._template, self.model_type)
        return ToolGrammars(family, make_tokenizer, lambda t: tokenizer.decode([t]),
                            single_token, vocab)

    def _tool_processors(self, request: GenerationRequest, generic: bool) -> list[Any]:
        """The row's tool-call constraint when it offers tools (none under a JSON
        response_format, whose grammar already holds the whole reply; on a base model,
        only a forced call, which is `generic`: tool_grammar.GENERIC)."""
        if not request.tools or request.sampling.json_schema is not None \
                or (self._base and not generic):
            return []
        guide = self._tool_grammars.guide(request.tools, request.tool_choice, request.tool_name,
                                          generic=generic)
        return [] if guide is None else [ToolCallProcessor(guide, self._vocab_size)]

    def _schedule(self, out: dict[str, list[Event]]) -> None:
        """Move pending requests into the single slot or the batch, up to capacity.

        A lone request on an idle engine takes the single path. Otherwise pending
        requests join the batch a prefill group at a time, shortest first
        (core.engines.prefill_order): a big group waits until the rows before it have
        their first token, since BatchGenerator hands a step's tokens back only after
        that step's prefill, and the short prompts would otherwise wait for the long.
        """
        for act in [a for a in self._pending if a.error is not None]:
            self._pending.remove(act)
            out.setdefault(act.req.request_id, []).extend([act.error, Done("error")])
        free = self.max_concurrency - len(self._batch) - (1 if self._single else 0)
        if not self._pending or free <= 0:
            return
        if self._single is None and not self._batch and len(self._pending) == 1:
            self._start_single(self._pending.popleft())
            return
        ready = self._next_group(free)
        if not ready:
            return
        self._compact(force=True)
        if self._single is not None:
            self._single_to_batch(out)
        for act in ready:
            self._insert_batch(act)

    def _next_group(self, free: int) -> list[_Request]:
        """Take the next prefill group off the pending queue (empty: not yet)."""
        pending = list(self._pending)
        if self._prefill_order == "fifo":  # every pending request at once, in order
            group = pending[:free]
        else:
            bg = self._bg
            if bg._unprocessed_sequences:
                return []
            # One group prefills at a time, except that short prompts join a long prompt
            # being prefilled chunk by chunk (at one chunk's padding) rather than wait for
            # all of it; never its last chunk, which would delay its first token.
            joining = len(bg._prompt_batch)
            if joining and self._prefill_left(bg) <= self._prefill_step:
                return []
            for act in pending:
                if act.new_tokens is None:
                    act.new_tokens = len(act.prompt) - self._prefix.match(act.prompt)
            waiting = [Waiting(act.new_tokens or 0, act.submitted) for act in pending]
            limit = min(free, bg.prefill_batch_size - joining)
            chosen = next_group(waiting, limit, time.perf_counter(), self._group_tokens,
                                self._group_slack)
            if padded_tokens(waiting, chosen) > self._group_tokens and (
                joining or any(not act.generated for act in self._batch.values())
            ):
                return []
            group = [pending[i] for i in chosen]
        taken = {id(act) for act in group}
        self._pending = deque(act for act in pending if id(act) not in taken)
        return group

    @staticmethod
    def _prefill_left(bg: BatchGenerator) -> int:
        """Prompt tokens the longest row of BatchGenerator's prefill still has to go."""
        return max((sum(len(s) for s in row[0]) for row in bg._currently_processing), default=0)

    # -- Single-stream path ----------------------------------------------------------

    def _start_single(self, act: _Request) -> None:
        cache, cached = self._prefix.fetch(act.prompt, take_forks=True)
        if self._kv is not None:  # kv-disk hook: a stored cache covering more
            cache, cached = self._kv.lookup(act.prompt, cache, cached)
        if cache is None:
            cache = make_prompt_cache(self._model)
        act.cached = cached
        rest = mx.array(act.prompt[cached:])
        context = mx.array(act.prompt) if act.processors else None
        with mx.stream(self._stream):
            if self._bucketed and rest.shape[0] > 1 and all(type(c) is KVCache for c in cache):
                y = self._prefill_in_buckets(rest, cache, act, context)
                mx.async_eval(y)
                self._single = _Single(act, cache, y, context)
                return
            # A short remainder (a cached turn's new tokens) goes in one forward pass that
            # also yields the first token. A long one is prefilled without reading logits
            # (the vocabulary projection of every position would cost more than a pass),
            # then its last token is fed alone, as generate_step does.
            while rest.shape[0] > _ONE_PASS_TAIL:
                n = min(self._prefill_step, rest.shape[0] - 1)
                self._model(rest[None, :n], cache=cache)
                mx.eval([c.state for c in cache])
                rest = rest[n:]
            y = self._sample_one(rest, cache, act, context)
            mx.async_eval(y)
        self._single = _Single(act, cache, y, context)

    def _prefill_in_buckets(
        self, rest: mx.array, cache: list[Any], act: _Request, context: mx.array | None
    ) -> mx.array:
        """Prefill `rest` in shapes from a small fixed set and sample the first token.

        MLX on CUDA pays a one-off cost (~30 ms on an H100 with Qwen3-0.6B) the first time
        a forward pass meets a new number of tokens, and a cached turn's new-token count is
        new almost every turn. So the prompt goes in chunks of a multiple of
        _PREFILL_QUANTUM tokens, then one pass over the last 1.._PREFILL_QUANTUM tokens
        padded up to a multiple of _TAIL_STEP, which also yields the first token (on a GPU
        the vocabulary projection of every position costs next to nothing). Padding sits
        after the real tokens, so under the causal mask no real token sees it, and it is
        trimmed off the cache at once. Every shape is met in warm-up; plain KV caches
        only (a rotating window would lose real tokens to the padding).
        """
        n = rest.shape[0]
        tail = (n - 1) % _PREFILL_QUANTUM + 1
        step = max(_PREFILL_QUANTUM, self._prefill_step // _PREFILL_QUANTUM * _PREFILL_QUANTUM)
        done = 0
        while done < n - tail:
            k = min(step, n - tail - done)
            self._model(rest[None, done : done + k], cache=cache)
            mx.eval([c.state for c in cache])
            done += k
        rest = rest[done:]
        size = _tail_bucket(tail)
        if size > tail:
            rest = mx.concatenate([rest, mx.zeros((size - tail,), dtype=rest.dtype)])
        y = self._sample_one(rest, cache, act, context, at=tail - 1)
        if size > tail:
            for layer in cache:
                layer.trim(size - tail)
        return y

    def _sample_one(
        self, tokens: mx.array, cache: list[Any], act: _Request, context: mx.array | None,
        at: int = -1,
    ) -> mx.array:
        logits = self._model(tokens[None], cache=cache)[:, at, :]
        for processor in act.processors:
            logits = processor(context, logits)
        if act.sampler is greedy:
            return greedy(logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return act.sampler(logprobs)

    def _step_single(self, out: dict[str, list[Event]]) -> None:
        s = self._single
        assert s is not None
        if s.act.first_token_at is not None and self._speculating(s.act) and self._speculate(s, out):
            return
        events: list[Event] = []
        if s.act.first_token_at is None and self.eager_first_token:
            # The first token is read and handed out before the next pass is queued:
            # queueing costs a whole pass's kernel launches on the CPU (MLX on CUDA is
            # launch-bound at batch 1), which pipelining hides for every later token but
            # would add to the time to first token.
            token = s.y.item()
            s.emitted = True
        elif s.emitted:
            # s.y was handed out already: this step only queues the pass that feeds it
            # (two passes in one step would make it twice as slow as the rest).
            with mx.stream(self._stream):
                s.y = self._advance(s)
            s.emitted = False
            return
        else:
            with mx.stream(self._stream):
                nxt = self._advance(s)
            token = s.y.item()
            s.y = nxt
        finish = self._take_token(s.act, token, events)
        if finish is not None:
            self._single = None
            self._finish(s.act, finish, events)
            self._remember(s.act, self._fed_tokens(s), s.cache)
        elif len(s.act.generated) % 256 == 0:
            _trim_buffer_cache()
        out[s.act.req.request_id] = events

    def _speculating(self, act: _Request) -> bool:
        """Whether this lone request drafts (decided on its first step, then kept up to date)."""
        if act.spec is None:
            act.spec = Acceptance()
            act.spec.on = (self.speculative and act.sampler is greedy
                           and speculable(act.req.sampling)
                           and not any(type(p) is ToolCallProcessor for p in act.processors))
            if act.spec.on:
                act.drafter = NgramDrafter(act.prompt)
                self.acceptance = act.spec
        if not act.spec.on or act.drafter is None:
            return False
        behind = len(act.prompt) + len(act.generated) - len(act.drafter.tokens)
        if behind:  # tokens decoded since the last lookup (in a batch, or plain steps)
            act.drafter.extend(act.generated[-behind:])
        return True

    def _speculate(self, s: _Single, out: dict[str, list[Event]]) -> bool:
        """One prompt-lookup step (core.engines.speculative): feed the last token plus the
        drafted ones in one pass, keep the drafts the greedy argmax confirms and the
        model's own next token, trim the rejected ones off the cache. Leaves `s` with its
        last token handed out but not fed (`emitted`), the state the plain path resumes
        from. False when nothing was done (the plain step runs instead)."""
        act = s.act
        events: list[Event] = []
        if not s.emitted:  # the plain path's queued token: hand it out first
            token = s.y.item()
            s.emitted = True
            act.drafter.extend([token])
            finish = self._take_token(act, token, events)
            if finish is not None:
                self._end_single(s, finish, events, out)
                return True
        k = min(act.spec.k, act.max_tokens - len(act.generated))
        if not all(_rewindable(c, k + 1) for c in s.cache):
            k = 0  # a sliding window past its size cannot take drafts back
        draft = act.drafter.draft(k) if k else []
        by_model = not draft and self._draft_model is not None and k > 0
        if by_model:  # nothing to look up: the draft model guesses
            draft = self._model_draft(act, min(k, _MODEL_DRAFT))
        if not draft:
            if not by_model:
                act.spec.miss()
            if events:  # the plain step would read a token nobody queued: queue it here
                with mx.stream(self._stream):
                    s.y = self._advance(s)
                s.emitted = False
                out[act.req.request_id] = events
                return True
            return False
        fed = [act.generated[-1], *draft]
        with mx.stream(self._stream):
            logits = self._model(mx.array(fed)[None], cache=s.cache)
            if s.context is None:
                predicted = mx.argmax(logits[0], axis=-1).tolist()
            else:  # each row's penalties see the history as it would be at that row
                rows = []
                for j in range(len(fed)):
                    row = logits[:, j, :]
                    context = mx.concatenate([s.context, mx.array(fed[:j + 1])])
                    for processor in act.processors:
                        row = processor(context, row)
                    rows.append(mx.argmax(row, axis=-1))
                predicted = mx.concatenate(rows).tolist()
        n = accepted(draft, predicted)
        act.spec.record(len(draft), n)
        if by_model:  # its cache keeps the drafts it fed that were accepted
            fed_ok = min(n, len(draft) - 1)
            for layer in act.draft_cache or ():
                layer.trim(len(draft) - 1 - fed_ok)
            act.draft_fed += fed_ok
        kept = [*draft[:n], predicted[n]]
        for i, token in enumerate(kept):
            finish = self._take_token(act, token, events)
            if finish is not None or i == n:
                # the cache keeps every token before this one, and this one too when it
                # is a draft that ends the reply (it was fed in this pass)
                keep = i + 2 if i < n else i + 1
                for layer in s.cache:
                    layer.trim(len(fed) - keep)
                s.emitted = keep == i + 1
                if s.context is not None:
                    s.context = mx.concatenate([s.context, mx.array(fed[:keep])])
                break
        act.drafter.extend(act.generated[len(act.drafter.tokens) - len(act.prompt):])
        s.y = mx.array(act.generated[-1:])
        if finish is not None:
            self._end_single(s, finish, events, out)
        else:
            out[act.req.request_id] = events
        return True

    def _load_draft(self, path: str | None) -> Any:
        """The draft model named by the "draft_model" option (None without one); it must
        share the model's vocabulary, since its token ids are checked as the model's."""
        if not path:
            return None
        model, tokenizer, config = _load(Path(path))
        if (vocab_size(config, tokenizer) != self._vocab_size
                or tokenizer.vocab != self._tokenizer.vocab):
            raise EngineLoadError(
                "LOAD_FAILED",
                f"The draft model {Path(path).name} has another vocabulary than this model; "
                "pick a draft model of the same family (same tokenizer).")
        return model

    def _model_draft(self, act: _Request, k: int) -> list[int]:
        """Up to `k` greedy tokens from the draft model after the history (prompt +
        generated); its own cache first catches up on whatever it has not seen. Leaves
        `draft_fed` at the history's length (the caller adds the accepted drafts)."""
        history = len(act.prompt) + len(act.generated)
        if act.draft_cache is None:
            act.draft_cache = make_prompt_cache(self._draft_model)
            act.draft_fed = 0
        if not all(_rewindable(c, history - act.draft_fed + k) for c in act.draft_cache):
            return []
        at = act.draft_fed
        behind = (act.prompt[at:] + act.generated if at < len(act.prompt)
                  else act.generated[at - len(act.prompt):])
        out: list[int] = []
        with mx.stream(self._stream):
            logits = self._draft_model(mx.array(behind)[None], cache=act.draft_cache)
            while True:
                y = mx.argmax(logits[:, -1, :], axis=-1)
                out.append(y.item())
                if len(out) == k:
                    break
                logits = self._draft_model(y[None], cache=act.draft_cache)
        act.draft_fed = history
        return out

    def _end_single(self, s: _Single, finish: str, events: list[Event],
                    out: dict[str, list[Event]]) -> None:
        if s.emitted:  # feed the last token, as the plain path does, so the cache that
            # the prefix cache keeps covers the whole reply (the next turn reuses it)
            with mx.stream(self._stream):
                self._model(s.y[None], cache=s.cache)
                mx.eval([c.state for c in s.cache])
            s.emitted = False
        self._single = None
        self._finish(s.act, finish, events)
        self._remember(s.act, self._fed_tokens(s), s.cache)
        out[s.act.req.request_id] = events

    def _advance(self, s: _Single) -> mx.array:
        """Queue the pass that feeds `s.y` and samples the token after it."""
        if s.context is not None:
            s.context = mx.concatenate([s.context, s.y])
        nxt = self._sample_one(s.y, s.cache, s.act, s.context)
        mx.async_eval(nxt)
        return nxt

    @staticmethod
    def _fed_tokens(s: _Single) -> list[int]:
        """The tokens `s.cache` holds: all but a handed-out token not yet fed."""
        act = s.act
        if s.emitted:
            return act.prompt + act.generated[:-1]
        return act.prompt + act.generated

    def _single_to_batch(self, out: dict[str, list[Event]]) -> None:
        """Hand the running single request to the batch with its cache, nothing recomputed.

        Its queued token is read and emitted here: BatchGenerator treats the last token of
        an inserted sequence as prompt (fed, not reported), and the cache already holds
        everything before it.
        """
        s = self._single
        assert s is not None
        self._single = None
        act = s.act
        token = s.y.item()
        if not s.emitted:
            events = out.setdefault(act.req.request_id, [])
            finish = self._take_token(act, token, events)
            if finish is not None:
                self._finish(act, finish, events)
                self._remember(act, act.prompt + act.generated[:-1], s.cache)
                return
        [uid] = self._bg.insert(
            [[token]],
            max_tokens=[act.max_tokens - len(act.generated)],
            caches=[s.cache],
            all_tokens=[act.prompt + act.generated[:-1]],
            samplers=[act.sampler],
            logits_processors=[act.processors],
        )
        act.uid = uid
        self._batch[uid] = act

    def _batch_to_single(self) -> None:
        """Move the batch's last request back to the single path, nothing recomputed.

        The batch has already queued that request's next token (sampled, not yet read) and
        its cache holds everything before it: exactly the single path's state.
        """
        bg = self._bg
        gen = bg._generation_batch
        if len(gen) != 1 or len(bg._prompt_batch) or bg._unprocessed_sequences:
            return
        [(uid, act)] = self._batch.items()
        y = gen._next_tokens
        if y is None or gen.uids != [uid]:
            return
        cache = gen.extract_cache(0)
        bg.remove([uid])
        del self._batch[uid]
        act.uid = None
        context = mx.array(act.prompt + act.generated) if act.processors else None
        self._single = _Single(act, cache, y, context)

    # -- Batched path ----------------------------------------------------------------

    def _new_batch_generator(self) -> BatchGenerator:
        bg = BatchGenerator(
            self._model,
            stop_tokens=[[t] for t in sorted(self._eos)],
            completion_batch_size=self.max_concurrency,
            prefill_batch_size=min(8, self.max_concurrency),
            prefill_step_size=self._prefill_step,
        )
        bg._generation_batch = _LeanGenerationBatch.empty(self._model, bg.sampler)
        return bg

    def _insert_batch(self, act: _Request) -> None:
        cache, cached = self._prefix.fetch(act.prompt)
        if self._kv is not None:  # kv-disk hook: a stored cache covering more
            cache, cached = self._kv.lookup(act.prompt, cache, cached)
        act.cached = cached
        [uid] = self._bg.insert(
            [act.prompt[cached:]],
            max_tokens=[act.max_tokens],
            caches=[cache] if cache is not None else None,
            all_tokens=[act.prompt[:cached]],
            samplers=[act.sampler],
            logits_processors=[act.processors],
        )
        act.uid = uid
        self._batch[uid] = act

    def _step_batch(self, out: dict[str, list[Event]]) -> None:
        counters = self._bg._counters
        if counters.generation_steps % 512 == 511:
            # mlx_lm empties MLX's whole buffer cache every 512 steps, so the next step
            # re-allocates every buffer (a stall); trim by size instead, below.
            counters.generation_steps += 1
            _trim_buffer_cache()
        _, responses = self._bg.next()
        now = time.perf_counter()
        finished: list[int] = []
        batch = self._batch
        for uid, token in responses:
            act = batch.get(uid)
            if act is None:
                continue
            events = out.setdefault(act.req.request_id, [])
            finish = self._take_token(act, token, events, now)
            if finish is not None:
                finished.append(uid)
                self._finish(act, finish, events)
        if finished:
            self._retire(finished)
        self._compact()

    def _retire(self, uids: list[int]) -> None:
        """Take finished requests off the batch, keeping their KV for the prefix cache.

        Their rows stay in the batch, decoding tokens nobody reads, until `_compact`
        finds removing them worth it: removing rows copies every layer's KV of the rows
        that stay, which made each step where a group of requests finished several
        times slower than the rest, while a few idle rows cost next to nothing at the
        batch sizes where that copy hurts. Plain KV layers get one lazy gather of the
        finished rows per layer, split per request on later steps (`_save_rows`).
        """
        gen = self._bg._generation_batch
        where = {u: i for i, u in enumerate(gen.uids)}
        layers = gen.prompt_cache
        if not (
            layers
            and all(u in where for u in uids)
            and all(type(c) is BatchKVCache and c.keys is not None for c in layers)
        ):
            caches = self._bg.remove(uids, return_prompt_caches=True)
            for uid in uids:
                act = self._batch.pop(uid)
                if uid in caches:
                    cache, tokens = caches[uid]
                    self._remember(act, tokens, cache)
            return
        rows = mx.array([where[u] for u in uids])
        kv = [(c.keys[rows], c.values[rows], c._idx) for c in layers]
        mx.async_eval([a for k, v, _ in kv for a in (k, v)])
        # Copies: an idle row's token list keeps growing while it stays in the batch.
        tokens = [list(gen.tokens[where[u]]) for u in uids]
        acts = [self._batch.pop(uid) for uid in uids]
        self._idle_rows.update(uids)
        self._unsaved.append(_FinishedRows(acts, tokens, kv))

    def _compact(self, force: bool = False) -> None:
        """Remove the idle rows of finished requests once that is cheap or needed.

        Cheap: the copy is of the rows that stay, so it waits until at most a quarter
        of the rows are live (or none, when the batch is simply emptied). Needed: before
        new requests join (joining copies the cache anyway), and when one request is
        left, so it can go back to the single-stream path.
        """
        if not self._idle_rows:
            return
        live = len(self._batch)
        if force or live <= 1 or live * 4 <= live + len(self._idle_rows):
            self._bg.remove(sorted(self._idle_rows))
            self._idle_rows.clear()

    def _save_rows(self, rows: _FinishedRows) -> None:
        """Split a finished group's gathered KV per request and store it (see above).

        Every row ends at the cache's write index `end`, so a request's KV is its last
        len(tokens) columns; no padding has to be read back from the device.
        """
        for j, (act, tokens) in enumerate(zip(rows.acts, rows.tokens, strict=True)):
            cache = []
            for keys, values, end in rows.kv:
                start = end - len(tokens)
                c = KVCache()
                c.keys = keys[j : j + 1, :, start:end]
                c.values = values[j : j + 1, :, start:end]
                c.offset = len(tokens)
                cache.append(c)
            self._remember(act, tokens, cache)

    # -- Tokens to events ------------------------------------------------------------

    def _take_token(
        self, act: _Request, token: int, events: list[Event], now: float | None = None
    ) -> str | None:
        """Account one generated token; return a finish reason when the request ends."""
        if now is None:
            now = time.perf_counter()
        if act.first_token_at is None:
            act.first_token_at = now
        act.last_token_at = now
        act.generated.append(token)
        if type(act.sampler) is LogprobRecorder:
            self._report_logprobs(act.sampler, token, events)
        if token in self._eos:
            act.raw += self._tokenizer.decode([token])
            return "stop"
        act.detok.add_token(token)
        segment = act.detok.last_segment
        act.raw += segment
        text, stopped = act.tail.feed(segment)
        if text:
            events.append(TextDelta(text))
        if stopped:
            return "stop"
        if len(act.generated) >= act.max_tokens:
            return "length"
        return None

    def _report_logprobs(self, recorder: LogprobRecorder, token: int, events: list[Event]) -> None:
        """The token's log-probability entry, in OpenAI's shape (end-of-turn tokens skipped)."""
        logprob, top = recorder.pop()
        if token in self._eos:
            return
        text, raw = self._token_text(token)
        entry = {"token": text, "logprob": logprob, "bytes": raw, "top_logprobs": [
            {"token": t, "logprob": lp, "bytes": b}
            for t, b, lp in ((*self._token_text(i), v) for i, v in top)]}
        events.append(Logprobs((entry,)))

    def _token_text(self, token: int) -> tuple[str, list[int]]:
        known = self._token_texts.get(token)
        if known is None:
            text = self._tokenizer.decode([token])
            known = self._token_texts[token] = (text, list(text.encode("utf-8", "replace")))
        return known

    def _finish(self, act: _Request, reason: str, events: list[Event]) -> None:
        if not act.generated or act.generated[-1] not in self._eos:
            act.detok.finalize()
            segment = act.detok.last_segment
            act.raw += segment
        else:
            segment = ""
        if reason != "cancelled":
            tail = act.tail.end(segment, cut=reason == "length")
            if tail:
                events.append(TextDelta(tail))
        events.append(self._usage(act))
        events.append(Done(reason))  # type: ignore[arg-type]

    def _remember(self, act: _Request, tokens: list[int], cache: list[Any]) -> None:
        """Keep a finished request's cache, with the text it spells at exact boundaries:
        the prompt's (inherited ones and its end) and, when `tokens` holds every generated
        token, the reply's end. A regenerated or edited turn reuses the ids up to them."""
        if self._kv is not None:  # kv-disk hook: queued for disk, written off this thread
            self._kv.finished(act.req, act.prompt, act.text, act.marks, act.raw, tokens, cache)
        if act.text is None:
            self._prefix.store(tokens, cache)
            return
        text = act.text + act.raw
        marks = (*act.marks, (len(act.text), len(act.prompt)))
        if len(tokens) == len(act.prompt) + len(act.generated):
            marks = (*marks, (len(text), len(tokens)))
        self._prefix.store(tokens, cache, text, marks)

    def _usage(self, act: _Request) -> Usage:
        first = act.first_token_at
        ttft = (first - act.submitted) * 1000 if first is not None else 0.0
        n = len(act.generated)
        span = (act.last_token_at or 0.0) - (first or 0.0)
        tps = (n - 1) / span if n > 1 and span > 0 else 0.0
        return Usage(len(act.prompt), act.cached, n, ttft, tps)

    def _apply_cancels(self, out: dict[str, list[Event]]) -> None:
        ids, self._cancelled = self._cancelled, set()
        for act in [a for a in self._pending if a.req.request_id in ids]:
            self._pending.remove(act)
            self._finish(act, "cancelled", out.setdefault(act.req.request_id, []))
        s = self._single
        if s is not None and s.act.req.request_id in ids:
            self._single = None
            self._finish(s.act, "cancelled", out.setdefault(s.act.req.request_id, []))
            self._remember(s.act, self._fed_tokens(s), s.cache)
        uids = [uid for uid, a in self._batch.items() if a.req.request_id in ids]
        if uids:
            caches = self._bg.remove(uids, return_prompt_caches=True)
            for uid in uids:
                act = self._batch.pop(uid)
                self._finish(act, "cancelled", out.setdefault(act.req.request_id, []))
                if uid in caches:
                    cache, tokens = caches[uid]
                    self._remember(act, list(tokens), cache)

    # -- Warm-up ---------------------------------------------------------------------

    def warmup(self, batch_sizes: tuple[int, ...]) -> None:
        """Meet every shape a user will meet before a user does.

        Each batch size once (decode kernels), then a long prompt and its next turn off
        the prefix cache (prefill shapes, cache growth past 256-token steps, a short
        suffix over a long cached history), then the batch-to-single hand-back.
        """
        greedy = SamplingParams(temperature=0.0, max_tokens=4)
        for size in batch_sizes:
            size = min(int(size), self.max_concurrency)
            for i in range(size):
                req = GenerationRequest(f"__warmup-{size}-{i}", (), greedy)
                prompt = [int(t) for t in self._warmup_prompt(i)]
                self._pending.append(self._admit(req, prompt=prompt))
            self._drain()
        if batch_sizes and self._warmup_prefill and self._bucketed:
            self._warmup_buckets()
        if batch_sizes and self._warmup_prefill:
            base = self._warmup_prompt(0)
            length = max(min(_WARMUP_LONG_PROMPT, self.context_size // 2), 2)
            long = (base * (length // len(base) + 1))[:length]
            first = self._admit(GenerationRequest("__warmup-long", (), greedy), prompt=long)
            self._pending.append(first)
            self._drain()
            follow = long + first.generated + base[:16]
            req = GenerationRequest("__warmup-next-turn", (), greedy)
            self._pending.append(self._admit(req, prompt=follow))
            self._drain()
        self._unsaved.clear()
        self._prefix.clear()
        mx.clear_cache()
        # Everything alive now lives as long as the engine: keep it out of the collector's
        # full passes, which would otherwise walk it during decoding.
        gc.collect()
        gc.freeze()

    def _warmup_buckets(self) -> None:
        """One pass of every prefill shape _prefill_in_buckets uses (about 17 on a GPU):
        the chunks from an empty cache, the padded last pieces over a cached history."""
        step = max(_PREFILL_QUANTUM, self._prefill_step // _PREFILL_QUANTUM * _PREFILL_QUANTUM)
        base = self._warmup_prompt(0)
        with mx.stream(self._stream):
            for k in range(_PREFILL_QUANTUM, min(step, self.context_size - 1) + 1, _PREFILL_QUANTUM):
                cache = make_prompt_cache(self._model)
                self._model(mx.array([(base * (k // len(base) + 1))[:k]]), cache=cache)
                mx.eval([c.state for c in cache])
            history = (base * (300 // len(base) + 1))[:300]
            for size in sorted({_tail_bucket(t) for t in range(1, _PREFILL_QUANTUM + 1)}):
                if 300 + size >= self.context_size:
                    break
                cache = make_prompt_cache(self._model)
                self._model(mx.array([history]), cache=cache)
                logits = self._model(mx.array([(base * (size // len(base) + 1))[:size]]), cache=cache)
                mx.eval(mx.argmax(logits[:, -1, :], axis=-1))

    def _drain(self) -> None:
        while self.has_work():
            self.step()

    def _warmup_prompt(self, i: int) -> list[int]:
        ids = self._tokenizer.encode(f"Warm up number {i}: count to ten.")
        return list(ids) or [0, 1]


# Prompt tokens of the warm-up's long request: past two 256-token cache steps.
_WARMUP_LONG_PROMPT = 600
# Prompt remainders up to this many tokens are prefilled and sampled in one pass.
_ONE_PASS_TAIL = 32
# Bucketed prefill (GPU): chunks of a multiple of this many tokens, then a last piece of
# 1..this many padded up to a multiple of _TAIL_STEP (a lone token stays one token).
_PREFILL_QUANTUM = 256
_TAIL_STEP = 32


# Tokens a draft model proposes per pass (it runs one pass per token).
_MODEL_DRAFT = 4


def _rewindable(layer: Any, n: int) -> bool:
    """Whether `n` tokens fed to this cache layer can be trimmed off again: a plain KV
    cache always; a sliding window (RotatingKVCache) only while it has not wrapped."""
    if type(layer) is KVCache:
        return True
    return type(layer) is RotatingKVCache and layer.offset + n < layer.max_size


def _tail_bucket(n: int) -> int:
    """The padded length of a last prefill piece of n tokens."""
    return 1 if n == 1 else -(-n // _TAIL_STEP) * _TAIL_STEP
# Queued prefix-cache entries indexed per engine step (see PrefixCache.settle).
_SETTLE_PER_STEP = 2
# MLX keeps freed buffers for reuse; emptying that cache makes the next steps allocate
# afresh (slow on CUDA), so it is emptied only when it holds more than this.
_BUFFER_CACHE_LIMIT = 2 * 1024**3


def _trim_buffer_cache() -> None:
    if mx.get_cache_memory() > _BUFFER_CACHE_LIMIT:
        mx.clear_cache()


def _default_warmup_sizes(max_concurrency: int) -> tuple[int, ...]:
    """1..8, then every multiple of 8 (requests join in prefill groups of 8)."""
    sizes = set(range(1, min(8, max_concurrency) + 1))
    sizes |= set(range(16, max_concurrency + 1, 8))
    sizes.add(max_concurrency)
    return tuple(sorted(sizes))


def _fresh_detokenizer(tokenizer: Any, keep_leading_space: bool = False) -> Any:
    # A shallow copy shares the (expensive) token map; reset gives it its own state.
    detok = copy.copy(tokenizer.detokenizer)
    detok.reset()
    if keep_leading_space and not isinstance(getattr(type(detok), "text", None), property):
        # mlx_lm's BPE and SPM detokenizers drop the first token's leading space while
        # their text is empty: right for a chat reply, wrong for a raw prompt's
        # continuation (" sat" after "The cat"). Text already begun (a placeholder the
        # engine never reads: it takes only last_segment) keeps it.
        detok.text, detok.offset = "\0", 1
    return detok


def _load(path: Path) -> tuple[Any, Any, dict[str, Any]]:
    """Load model and tokenizer, turning user-caused failures into EngineLoadError."""
    try:
        weights = check_mlx_dir(path)
        for w in weights:
            check_safetensors(w)
    except SelectionError as exc:
        raise EngineLoadError(exc.code, exc.message) from exc
    try:  # the Hub's words: read bounded (check_mlx_dir has looked at it once already)
        config = json_object(path / "config.json")
    except (OSError, ValueError) as exc:
        raise EngineLoadError("MODEL_CORRUPT", f"config.json is unreadable: {exc}") from exc
    check_architecture(config)
    from mlx_lm.utils import load

    try:
        model, tokenizer = load(str(path))
    except ValueError as exc:
        raise EngineLoadError(
            "MODEL_CORRUPT",
            f"The weights in {path} do not match its config.json ({exc}); re-download "
            "or re-import the model.",
        ) from exc
    except Exception as exc:  # noqa: BLE001 - anything else is a load failure, reported
        raise EngineLoadError("LOAD_FAILED", f"Could not load {path}: {exc}") from exc
    return model, tokenizer, config
