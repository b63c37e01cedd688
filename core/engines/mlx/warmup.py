"""Warm-up: meet every shape a user will meet before a user does.

On a GPU each new batch size, prefill shape and cache length costs a compilation the
first time; running them at load keeps those stalls out of a user's first replies.
"""

from __future__ import annotations

import gc
from collections import deque
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from core.engines.base import GenerationRequest, SamplingParams
from core.engines.mlx.cached_group import group_pass, sharing
from core.engines.mlx.single import PREFILL_QUANTUM, tail_bucket
from core.engines.mlx.state import FinishedRows, Request

# Prompt tokens of the warm-up's long request: past two 256-token cache steps.
_WARMUP_LONG_PROMPT = 600


def default_warmup_sizes(max_concurrency: int) -> tuple[int, ...]:
    """1..8, then every multiple of 8 (requests join in prefill groups of 8)."""
    sizes = set(range(1, min(8, max_concurrency) + 1))
    sizes |= set(range(16, max_concurrency + 1, 8))
    sizes.add(max_concurrency)
    return tuple(sorted(sizes))


class WarmUp:
    """MlxEngine's warm-up (a base class of MlxEngine, which holds the state)."""

    max_concurrency: int
    context_size: int
    _model: Any
    _tokenizer: Any
    _stream: Any
    _prefix: Any
    _pending: deque[Request]
    _unsaved: deque[FinishedRows]
    _warmup_prefill: bool
    warmup_prefill_seen: tuple[int, float] | None = None  # (tokens, s) of the long prompt
    _bucketed: bool
    _prefill_step: int
    _group_cached: bool
    _group_matmul: bool

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
        if batch_sizes and self._warmup_prefill and self._group_cached:
            self._warmup_group()
        if batch_sizes and self._warmup_prefill:
            base = self._warmup_prompt(0)
            length = max(min(_WARMUP_LONG_PROMPT, self.context_size // 2), 2)
            long = (base * (length // len(base) + 1))[:length]
            first = self._admit(GenerationRequest("__warmup-long", (), greedy), prompt=long)
            self._pending.append(first)
            self._drain()
            if first.first_token_at is not None:  # the disk cache's cost model starts here
                self.warmup_prefill_seen = (len(long), first.first_token_at - first.submitted)
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
        step = max(PREFILL_QUANTUM, self._prefill_step // PREFILL_QUANTUM * PREFILL_QUANTUM)
        base = self._warmup_prompt(0)
        with mx.stream(self._stream):
            for k in range(PREFILL_QUANTUM, min(step, self.context_size - 1) + 1, PREFILL_QUANTUM):
                cache = make_prompt_cache(self._model)
                self._model(mx.array([(base * (k // len(base) + 1))[:k]]), cache=cache)
                mx.eval([c.state for c in cache])
            history = (base * (300 // len(base) + 1))[:300]
            for size in sorted({tail_bucket(t) for t in range(1, PREFILL_QUANTUM + 1)}):
                if 300 + size >= self.context_size:
                    break
                cache = make_prompt_cache(self._model)
                self._model(mx.array([history]), cache=cache)
                logits = self._model(mx.array([(base * (size // len(base) + 1))[:size]]), cache=cache)
                mx.eval(mx.argmax(logits[:, -1, :], axis=-1))

    def _warmup_group(self) -> None:
        """The group pass of cached turns (core.engines.mlx.cached_group) at each of its
        row counts: on CUDA some of its kernels are compiled the first time they are met
        (a chat bench's first later turns waited 4.7 s for them on an H200)."""
        base = self._warmup_prompt(0)
        rows = 2
        with mx.stream(self._stream):
            while rows <= min(8, self.max_concurrency):
                caches = []
                for i in range(rows):
                    cache = make_prompt_cache(self._model)
                    self._model(mx.array([base[: 2 + i]]), cache=cache)
                    caches.append(cache)
                mx.eval([c.state for cache in caches for c in cache])
                if len(sharing(caches, [2] * rows)) < rows:
                    return
                logits, _ = group_pass(self._model, caches, [base[:2]] * rows,
                                       self._group_matmul)
                mx.eval(mx.argmax(logits, axis=-1))
                rows *= 2

    def _drain(self) -> None:
        while self.has_work():
            self.step()

    def _warmup_prompt(self, i: int) -> list[int]:
        ids = self._tokenizer.encode(f"Warm up number {i}: count to ten.")
        return list(ids) or [0, 1]
