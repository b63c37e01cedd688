"""MlxEngine: the Engine protocol and the hot loop, readable top to bottom here.

    step -> _schedule -> _step_single (or _speculate) / _step_batch -> _take_token -> _finish

The mechanics each stage calls live in the rooms beside this one, each a base class of
MlxEngine: admission (render, tokenise, samplers, grammars), scheduler (prefill groups),
single (the single-stream path), speculative (drafting on it), batch (BatchGenerator and
the moves between the paths), prefix (cache saves, the disk-KV hooks) and warmup. The
engine's state is set in __init__ below; every room declares the part it uses.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generation_stream

from core.engines.base import EngineLoadError, GenerationRequest, ModelSpec
from core.engines.base_prompt import base_format
from core.engines.grammar import Grammars
from core.engines.kv_mlx import MlxKvKeeper
from core.engines.mlx.admission import Admission
from core.engines.mlx.batch import BatchPath
from core.engines.mlx.checks import load_model
from core.engines.mlx.chunked import ChunkedPrefill
from core.engines.mlx.device_defaults import limit_cache, this_device
from core.engines.mlx.prefix import PrefixSaves
from core.engines.mlx.scheduler import Scheduling
from core.engines.mlx.single import SinglePath, trim_buffer_cache
from core.engines.mlx.speculative import Speculation
from core.engines.mlx.state import FinishedRows, Request, SingleStream
from core.engines.mlx.warmup import WarmUp, default_warmup_sizes
from core.engines.prefill_order import FREE_PADDED_TOKENS, PADDING_SLACK
from core.engines.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache
from core.engines.sampling import LogprobRecorder, SamplerCache, vocab_size
from core.engines.speculative import Acceptance
from core.events import Done, Event, Logprobs, TextDelta, Usage

# Queued prefix-cache entries indexed per engine step (see PrefixCache.settle).
_SETTLE_PER_STEP = 2
# A waiting prompt with at least this many tokens in the prefix cache is a cached turn
# (see _prefills_alone): moving a shorter history through the batch costs little.
_ALONE_MIN_CACHED = 256
# Once a turn has its first token, work set aside beside it (a summary written ahead)
# takes a step after each of its steps, so it still gets written while turns follow
# each other (a turn drafting several tokens a step stays ahead).
_ASIDE_EVERY = 1


class MlxEngine(Admission, Scheduling, SinglePath, ChunkedPrefill, Speculation, BatchPath,
                PrefixSaves, WarmUp):
    """Engine protocol over mlx_lm; the package docstring (core.engines.mlx) says the design."""

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
        # Prefill shapes, cached turns, history lengths, the buffer cache: per device
        # (core.engines.mlx.device_defaults)
        d = this_device()
        gb = spec.option("cache_limit_gb")
        self.cache_limit = limit_cache(d.cache_share, None if gb is None else float(gb))
        path = Path(spec.path)
        self._model, self._tokenizer, self._config = load_model(path)
        self.model_type = str(self._config.get("model_type"))
        self._eos = set(self._tokenizer.eos_token_ids)
        template = getattr(self._tokenizer, "chat_template", None)
        self._template: str | None = template if isinstance(template, str) else None
        # No chat template: a base model, prompted as a transcript (core.engines.base_prompt)
        self.base_model = self._template is None
        self._base = base_format(spec.option("base_format")) if self.base_model else None
        self._prefix = PrefixCache(int(spec.option("prefix_cache_bytes", DEFAULT_MAX_BYTES)))
        self._pending: deque[Request] = deque()
        self._cancelled: set[str] = set()
        self._single: SingleStream | None = None
        # A request made beside a conversation (a summary written ahead) decoding alone,
        # set aside while other requests run: it never slows a turn (see _park_aside).
        self._parked: SingleStream | None = None
        self._later: deque[Request] = deque()  # aside requests come in while others run
        self._turn_steps = 0  # single steps of a turn while work is set aside
        self._batch: dict[int, Request] = {}
        self._idle_rows: set[int] = set()  # batch rows of finished requests (see _retire)
        self._unsaved: deque[FinishedRows] = deque()
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
        # BatchGenerator's prompt batch without its whole-cache copies (core.engines.mlx.lean_prompt)
        self._lean_prompt = bool(spec.option("lean_prompt_batch", True))
        self._bg = self._new_batch_generator()
        self._warmup_prefill = bool(spec.option("warmup_prefill", d.warmup_prefill))
        # On a GPU a prompt is prefilled in a few fixed shapes (see _prefill_in_buckets).
        self._bucketed = bool(spec.option("bucketed_prefill", d.bucketed_prefill))
        # ... over a history bucketed to 256-token steps (core.engines.mlx.bucketed_kv)
        self._bucketed_kv = bool(spec.option("bucketed_kv", d.bucketed_kv))
        # how prompts share prefill passes
        self._group_tokens = int(spec.option("prefill_group_tokens", FREE_PADDED_TOKENS[d.device]))
        self._group_slack = float(spec.option("prefill_group_slack", PADDING_SLACK[d.device]))
        # A cached turn (a long history, a few new tokens) joining the batch is prefilled
        # alone first, up to this many new tokens (BatchPath._join_prefilled; 0: never).
        self._alone_tokens = int(spec.option("prefill_alone_tokens", d.prefill_alone_tokens))
        self._joined = False  # a step's schedule joined such turns (see step)
        # ... and such turns arriving together share one pass (core.engines.mlx.cached_group),
        # its attention as matmuls ("matmul") or MLX's fused kernel ("fused")
        self._group_cached = bool(spec.option("group_cached_turns", d.group_cached_turns))
        self._group_matmul = str(spec.option("group_attention", d.group_attention)) == "matmul"
        self._group_pipelined = bool(spec.option("group_pipelined", d.group_cached_turns))
        sizes = spec.option("warmup_batch_sizes")
        if sizes is None:
            sizes = default_warmup_sizes(self.max_concurrency)
        self._kv: MlxKvKeeper | None = None
        self.warmup(tuple(sizes))
        # kv-disk hook (issue 33): caches on disk across restarts (core.engines.kv_mlx)
        self._kv = self._open_kv(path)

    # -- Engine protocol -------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        if self._kv is not None:  # kv-disk hook: the writer pauses until the engine idles
            self._kv.engine_busy(True)
        self._pending.append(self._admit(request))

    def cancel(self, request_id: str) -> None:
        self._cancelled.add(request_id)

    def trim(self) -> None:
        """Memory is short (the pool's memory watch): the prompt caches go (the disk keeps
        what was saved); running requests keep their own KV."""
        self._prefix.clear()
        import mlx.core as mx

        mx.clear_cache()

    def has_work(self) -> bool:
        # Finished requests' caches still to be split and indexed count as work: the worker
        # then does it while idle (a few per step), not the next request's admission
        # (after a 64-request burst that was 50 entries, 3-20 ms on a lone turn's TTFT).
        return bool(self._pending or self._single or self._batch or self._cancelled
                    or self._parked or self._later
                    or self._unsaved or self._prefix.pending
                    or (self._kv is not None and self._kv.busy()))  # kv-disk hook

    def step(self) -> list[tuple[str, list[Event]]]:
        out: dict[str, list[Event]] = {}
        if self._cancelled:
            self._apply_cancels(out)
        self._park_aside()
        if self._pending:
            while self._unsaved:  # a new prompt may extend one of them
                self._save_rows(self._unsaved.popleft())
            self._schedule(out)
        if self._joined:
            # Cached turns were prefilled alone and their first tokens read: hand those
            # out now; the batch's step (which merges their caches in) comes next step.
            self._joined = False
        elif self._single is not None:
            self._step_single(out)
            self._aside_step(out)
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
        if self._kv is not None:  # kv-disk hook: disk writes only while nothing runs
            self._kv.engine_busy(bool(self._pending or self._single or self._batch
                                      or self._parked))
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
        self._single = self._parked = None
        self._batch.clear()
        self._idle_rows.clear()
        self._unsaved.clear()
        self._prefix.clear()
        self._bg.close()
        if self._kv is not None:  # kv-disk hook: queued writes finish first
            self._kv.close()

    def _park_aside(self) -> None:
        """Work beside a conversation (`aside`: its summary written ahead) is the lowest
        priority: decoding alone when another request comes, it is set aside with its
        cache and goes on once nothing else runs, so the turn starts alone on the
        single path (no batch built around a long cache: 1.3-4 s of a turn's first
        token on a CPU, bench/long_chat.py). It never starves while the engine idles."""
        s = self._single
        others = any(not a.req.aside for a in self._pending)
        if s is not None and self._parked is None and s.act.req.aside and others:
            self._parked, self._single = s, None
        busy = others or self._batch or (self._single is not None
                                         and not self._single.act.req.aside)
        if busy:  # one that comes meanwhile waits too
            self._later.extend(a for a in self._pending if a.req.aside)
            self._pending = deque(a for a in self._pending if not a.req.aside)
        elif self._parked is not None and self._single is None:
            self._single, self._parked = self._parked, None
        elif self._later and self._single is None:
            self._pending.extend(self._later)
            self._later.clear()

    def _aside_step(self, out: dict[str, list[Event]]) -> None:
        """A step of the work set aside, one in _ASIDE_EVERY steps of a lone turn that
        has its first token (its time to first token is never shared; its later tokens
        come a little slower while a summary is being written)."""
        turn, parked = self._single, self._parked
        if (parked is None or turn is None or self._batch or self._pending
                or turn.act.first_token_at is None):
            return
        self._turn_steps += 1
        if self._turn_steps % _ASIDE_EVERY:
            return
        self._single, self._parked = parked, None
        self._step_single(out)
        self._single, self._parked = turn, self._single  # None once it finished

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
        if self._single is not None and self._single.act.req.aside and self._single.at is not None:
            return  # an aside still prefilling joins no batch: the others wait for it
        if self._single is None and not self._batch and len(self._pending) == 1:
            act = self._pending.popleft()
            self._start_single(act)
            self._prompt_read(act, out)  # asked for: the count before the prefill's end
            return
        ready = self._next_group(free)
        if not ready:
            return
        self._compact(force=True)
        if self._single is not None:
            self._single_to_batch(out)
        alone = [act for act in ready if self._prefills_alone(act)]
        if alone:
            self._join_prefilled(alone, out)
        for act in ready:
            if act not in alone:
                self._insert_batch(act)
            self._prompt_read(act, out)

    def _prefills_alone(self, act: Request) -> bool:
        """A cached turn: a long history in the prefix cache and a few new tokens."""
        if self._alone_tokens <= 0:
            return False
        cached = self._prefix.match(act.prompt)
        return cached >= _ALONE_MIN_CACHED and len(act.prompt) - cached <= self._alone_tokens

    def _step_single(self, out: dict[str, list[Event]]) -> None:
        s = self._single
        assert s is not None
        if s.at is not None and not self._prefill_chunk(s, out):  # core.engines.mlx.chunked
            return
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
            trim_buffer_cache()
        out.setdefault(s.act.req.request_id, []).extend(events)  # after a PromptRead, if any

    def _step_batch(self, out: dict[str, list[Event]]) -> None:
        counters = self._bg._counters
        if counters.generation_steps % 512 == 511:
            # mlx_lm empties MLX's whole buffer cache every 512 steps, so the next step
            # re-allocates every buffer (a stall); trim by size instead, below.
            counters.generation_steps += 1
            trim_buffer_cache()
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

    # -- Tokens to events ------------------------------------------------------------

    def _take_token(
        self, act: Request, token: int, events: list[Event], now: float | None = None
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

    def _finish(self, act: Request, reason: str, events: list[Event]) -> None:
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
        events.append(Done(reason, act.tail.matched if reason == "stop" else None))  # type: ignore[arg-type]

    def _usage(self, act: Request) -> Usage:
        first = act.first_token_at
        ttft = (first - act.submitted) * 1000 if first is not None else 0.0
        n = len(act.generated)
        span = (act.last_token_at or 0.0) - (first or 0.0)
        tps = (n - 1) / span if n > 1 and span > 0 else 0.0
        return Usage(len(act.prompt), act.cached, n, ttft, tps)

    def _apply_cancels(self, out: dict[str, list[Event]]) -> None:
        ids, self._cancelled = self._cancelled, set()
        self._pending.extend(a for a in self._later if a.req.request_id in ids)
        self._later = deque(a for a in self._later if a.req.request_id not in ids)
        for act in [a for a in self._pending if a.req.request_id in ids]:
            self._pending.remove(act)
            self._finish(act, "cancelled", out.setdefault(act.req.request_id, []))
        for s in (self._single, self._parked):
            if s is not None and s.act.req.request_id in ids:
                if s is self._single:
                    self._single = None
                else:
                    self._parked = None
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
