"""The single-stream path: one request alone on a plain KV cache, generate_step style.

A lone user would pay for batching (BatchGenerator's batched cache makes single-stream
decode markedly slower), so one request decodes here with pipelining: the next token's
graph is queued with async_eval before the current one is read back. This room starts a
request (prefix cache, prefill, first token) and advances it; MlxEngine._step_single
reads the tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, make_prompt_cache

from core.engines.mlx.bucketed_kv import to_bucketed, to_plain
from core.engines.mlx.state import Request, SingleStream
from core.engines.sampling import greedy
from core.events import Event

# Prompt remainders up to this many tokens are prefilled and sampled in one pass.
ONE_PASS_TAIL = 32
# Work beside a conversation (a summary written ahead, its session warmed) prefills this
# many tokens a step, so a turn that comes meanwhile waits for one chunk, not the prompt
# (core.engines.mlx.chunked).
ASIDE_CHUNK = 256
# Bucketed prefill (GPU): chunks of a multiple of this many tokens, then a last piece of
# 1..this many padded up to a multiple of _TAIL_STEP (a lone token stays one token).
PREFILL_QUANTUM = 256
_TAIL_STEP = 32


def bucket_step(prefill_step: int) -> int:
    """A bucketed prefill's chunk: the prefill step, down to a multiple of PREFILL_QUANTUM."""
    return max(PREFILL_QUANTUM, prefill_step // PREFILL_QUANTUM * PREFILL_QUANTUM)


def tail_bucket(n: int) -> int:
    """The padded length of a last prefill piece of n tokens."""
    return 1 if n == 1 else -(-n // _TAIL_STEP) * _TAIL_STEP


# MLX keeps freed buffers for reuse; emptying that cache makes the next steps allocate
# afresh (slow on CUDA), so it is emptied only when it holds more than this.
_BUFFER_CACHE_LIMIT = 2 * 1024**3


def trim_buffer_cache() -> None:
    if mx.get_cache_memory() > _BUFFER_CACHE_LIMIT:
        mx.clear_cache()


def pick_token(logits: mx.array, act: Request, context: mx.array | None) -> mx.array:
    """One row's token from its logits: the request's processors, then its sampler (the
    greedy one on the logits as they are, any other on log-probabilities)."""
    for processor in act.processors:
        logits = processor(context, logits)
    if act.sampler is greedy:
        return greedy(logits)
    return act.sampler(logits - mx.logsumexp(logits, keepdims=True))


class SinglePath:
    """MlxEngine's single-stream methods (a base class of MlxEngine, which holds the state)."""

    _model: Any
    _stream: Any
    _prefix: Any
    _kv: Any
    _bucketed: bool
    _bucketed_kv: bool
    _prefill_step: int
    _single: SingleStream | None
    _chunked_start: Callable[[Request, list[Any], mx.array | None], bool]  # ChunkedPrefill's

    def _start_single(self, act: Request) -> None:
        act.alone = True
        # An aside (a summary written ahead) copies the conversation's cache: taking it
        # would leave the conversation's next turn to prefill its whole history again.
        cache, context = self._cache_for(act, take_forks=not act.req.aside)
        if self._chunked_start(act, cache, context):  # a chunk per step (core.engines.mlx.chunked)
            return
        y = self._prefill_alone(act, cache, context)
        self._single = SingleStream(act, cache, y, context)

    def _cache_for(self, act: Request, take_forks: bool = True) -> tuple[list[Any], mx.array | None]:
        """The request's starting cache (the prefix cache's, else a stored one covering
        more, else a fresh one; act.cached says how much it holds) and its context for
        the logits processors."""
        cache, cached = self._prefix.fetch(act.prompt, take_forks=take_forks)
        if self._kv is not None:  # kv-disk hook: a stored cache covering more
            cache, cached = self._kv.lookup(act.prompt, cache, cached)
        if cache is None:
            cache = make_prompt_cache(self._model)
        act.cached = cached
        return cache, mx.array(act.prompt) if act.processors else None

    def _in_buckets(self, n: int, cache: list[Any]) -> bool:
        """Whether _prefill_alone sends a remainder of `n` tokens in fixed shapes (GPU)."""
        return self._bucketed and n > 1 and all(type(c) is KVCache for c in cache)

    def _prefill_alone(self, act: Request, cache: list[Any], context: mx.array | None,
                       start: int | None = None) -> mx.array:
        """Prefill the prompt past `start` (`act.cached` by default) into `cache` (a plain
        per-request cache) and queue its first token (returned, not read)."""
        rest = mx.array(act.prompt[act.cached if start is None else start:])
        with mx.stream(self._stream):
            if self._in_buckets(rest.shape[0], cache):
                y = self._prefill_in_buckets(rest, cache, act, context)
                mx.async_eval(y)
                return y
            # A short remainder (a cached turn's new tokens) goes in one forward pass that
            # also yields the first token. A long one is prefilled without reading logits
            # (the vocabulary projection of every position would cost more than a pass),
            # then its last token is fed alone, as generate_step does.
            while rest.shape[0] > ONE_PASS_TAIL:
                n = min(self._prefill_step, rest.shape[0] - 1)
                self._model(rest[None, :n], cache=cache)
                mx.eval([c.state for c in cache])
                rest = rest[n:]
            y = self._sample_one(rest, cache, act, context)
            mx.async_eval(y)
        return y

    def _prefill_in_buckets(
        self, rest: mx.array, cache: list[Any], act: Request, context: mx.array | None
    ) -> mx.array:
        """Prefill `rest` in shapes from a small fixed set and sample the first token.

        MLX on CUDA pays a one-off cost (~30 ms on an H100 with Qwen3-0.6B) the first time
        a forward pass meets a new number of tokens, and a cached turn's new-token count is
        new almost every turn. So the prompt goes in chunks of a multiple of
        PREFILL_QUANTUM tokens, then one pass over the last 1..PREFILL_QUANTUM tokens
        padded up to a multiple of _TAIL_STEP, which also yields the first token (on a GPU
        the vocabulary projection of every position costs next to nothing). Padding sits
        after the real tokens, so under the causal mask no real token sees it, and it is
        trimmed off the cache at once. Every shape is met in warm-up; plain KV caches
        only (a rotating window would lose real tokens to the padding). The history's
        length is bucketed too, for the passes only (core.engines.mlx.bucketed_kv).
        """
        if self._bucketed_kv:
            to_bucketed(cache)
        try:
            return self._prefill_bucket_passes(rest, cache, act, context)
        finally:
            to_plain(cache)

    def _prefill_bucket_passes(
        self, rest: mx.array, cache: list[Any], act: Request, context: mx.array | None
    ) -> mx.array:
        n = rest.shape[0]
        tail = (n - 1) % PREFILL_QUANTUM + 1
        step = bucket_step(self._prefill_step)
        done = 0
        while done < n - tail:
            k = min(step, n - tail - done)
            self._model(rest[None, done : done + k], cache=cache)
            mx.eval([c.state for c in cache])
            done += k
        rest = rest[done:]
        size = tail_bucket(tail)
        if size > tail:
            rest = mx.concatenate([rest, mx.zeros((size - tail,), dtype=rest.dtype)])
        y = self._sample_one(rest, cache, act, context, at=tail - 1)
        if size > tail:
            for layer in cache:
                layer.trim(size - tail)
        return y

    def _sample_one(
        self, tokens: mx.array, cache: list[Any], act: Request, context: mx.array | None,
        at: int = -1,
    ) -> mx.array:
        return pick_token(self._model(tokens[None], cache=cache)[:, at, :], act, context)

    def _end_single(self, s: SingleStream, finish: str, events: list[Event],
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

    def _advance(self, s: SingleStream) -> mx.array:
        """Queue the pass that feeds `s.y` and samples the token after it."""
        if s.context is not None:
            s.context = mx.concatenate([s.context, s.y])
        nxt = self._sample_one(s.y, s.cache, s.act, s.context)
        mx.async_eval(nxt)
        return nxt

    @staticmethod
    def _fed_tokens(s: SingleStream) -> list[int]:
        """The tokens `s.cache` holds: all but a handed-out token not yet fed."""
        act = s.act
        if s.at is not None:  # a prefill under way (core.engines.mlx.chunked)
            return act.prompt[: s.at]
        if s.emitted:
            return act.prompt + act.generated[:-1]
        return act.prompt + act.generated
