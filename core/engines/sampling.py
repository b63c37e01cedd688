"""Per-request samplers and logits processors for the MLX engine, on both decode paths.

Why a module of its own: the engine samples a lone request on its own stream and a batch
row by row (core.engines.mlx), and a request may move between the two mid-reply. So
everything a request's sampling needs lives in objects owned by that request, called once
per sampled token whatever path calls them:

- penalties and logit_bias are mlx_lm logits processors, applied per row;
- a seeded request samples with its own PRNG key, split once per token, never MLX's
  global random state: its tokens are the same alone or inside a batch of strangers;
- a request that asks for log-probabilities gets a `LogprobRecorder` around its sampler,
  which queues each token's log-probability (and top alternatives) for the engine to read
  when it hands that token out.

Requests without any of this share one sampler object per setting (`greedy` for
temperature 0), so the batch keeps sampling every row in one call.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_logits_processors,
    make_sampler,
)

from core.engines.base import SamplingParams


def greedy(logits: mx.array) -> mx.array:
    """The temperature-0 sampler. It picks the same token from raw logits as from
    log-probabilities, so both decode paths skip the normalisation for it (two kernels a
    token on a launch-bound path); mlx_lm's sampler for temperature 0 is the same argmax."""
    return mx.argmax(logits, axis=-1)


class SeededSampler:
    """Samples with its own PRNG key, split once per token (see the module docstring)."""

    def __init__(self, sp: SamplingParams) -> None:
        self.temperature = sp.temperature
        self.top_p = sp.top_p
        self.top_k = sp.top_k
        self.min_p = sp.min_p
        self.key = mx.random.key(int(sp.seed or 0) % 2**64)

    def __call__(self, logprobs: mx.array) -> mx.array:
        if 0 < self.top_p < 1.0:
            logprobs = apply_top_p(logprobs, self.top_p)
        if self.min_p:
            logprobs = apply_min_p(logprobs, self.min_p)
        if self.top_k > 0:
            logprobs = apply_top_k(logprobs, self.top_k)
        self.key, key = mx.random.split(self.key)
        return mx.random.categorical(logprobs * (1.0 / self.temperature), key=key)


class LogprobRecorder:
    """A sampler wrapper that queues what each sampled token's log-probability was.

    Calls and tokens pair up in order: every call samples exactly the next token of the
    request, on whichever path, so the engine pops one entry per token it takes. The
    entries stay lazy arrays, evaluated with the token itself.
    """

    def __init__(self, inner: Any, top: int) -> None:
        self.inner = inner
        self.top = top
        self.queue: deque[tuple[mx.array, mx.array | None, mx.array | None]] = deque()

    def __call__(self, logprobs: mx.array) -> mx.array:
        token = self.inner(logprobs)
        chosen = mx.take_along_axis(logprobs, token[:, None], axis=-1)
        ids = values = None
        if self.top:
            ids = mx.argpartition(-logprobs, kth=self.top - 1, axis=-1)[:, : self.top]
            values = mx.take_along_axis(logprobs, ids, axis=-1)
            arrays = [chosen, ids, values]
        else:
            arrays = [chosen]
        mx.async_eval(arrays)
        self.queue.append((chosen, ids, values))
        return token

    def pop(self) -> tuple[float, list[tuple[int, float]]]:
        """The next token's log-probability and its top alternatives, best first."""
        chosen, ids, values = self.queue.popleft()
        top: list[tuple[int, float]] = []
        if ids is not None and values is not None:
            top = sorted(zip(ids[0].tolist(), values[0].tolist(), strict=True),
                         key=lambda p: -p[1])
        return float(chosen.item()), top


class SamplerCache:
    """One shared sampler object per plain setting, fresh ones where a request needs its own."""

    def __init__(self) -> None:
        self._shared: dict[tuple[float, float, int, float], Any] = {}

    def sampler_for(self, sp: SamplingParams) -> Any:
        if sp.temperature == 0:
            inner: Any = greedy
        elif sp.seed is not None:
            inner = SeededSampler(sp)
        else:
            key = (sp.temperature, sp.top_p, sp.top_k, sp.min_p)
            inner = self._shared.get(key)
            if inner is None:
                top_p = sp.top_p if sp.top_p < 1.0 else 0.0
                inner = self._shared[key] = make_sampler(
                    temp=sp.temperature, top_p=top_p, min_p=sp.min_p, top_k=sp.top_k
                )
        if sp.logprobs:
            return LogprobRecorder(inner, sp.top_logprobs)
        return inner


def logits_processors(sp: SamplingParams, vocab_size: int, repetition_penalty: float) -> list[Any]:
    """The request's penalties and bias as mlx_lm processors (empty for plain requests).

    `repetition_penalty` is the one to apply (the engine may adjust the request's for a
    base model). Raises ValueError (a BAD_REQUEST) for a logit_bias id outside the
    vocabulary.
    """
    penalty = repetition_penalty
    bias = sp.logit_bias_for(vocab_size) if sp.logit_bias else None
    if penalty == 1.0 and not sp.presence_penalty and not sp.frequency_penalty and not bias:
        return []
    return list(make_logits_processors(
        logit_bias=bias,
        repetition_penalty=penalty if penalty != 1.0 else None,
        repetition_context_size=sp.repetition_context_size,
        presence_penalty=sp.presence_penalty or None,
        presence_context_size=sp.presence_context_size,
        frequency_penalty=sp.frequency_penalty or None,
        frequency_context_size=sp.frequency_context_size,
    ))


def vocab_size(config: dict[str, Any], tokenizer: Any) -> int:
    """The width of the model's logits: its config's vocab_size (a multimodal config keeps
    it in text_config), else the tokenizer's vocabulary."""
    for section in (config, config.get("text_config") or {}):
        size = section.get("vocab_size") if isinstance(section, dict) else None
        if isinstance(size, int) and size > 0:
            return size
    return len(tokenizer.vocab)
