"""Cached turns that arrive together, prefilled in one batched pass (issue 49).

A later turn of a long conversation has a few new tokens over a long cached history.
When several such turns come at once (a client's conversations in lock-step), each was
prefilled alone, one pass after another (BatchPath._join_prefilled): on an H200 with
Qwen3-0.6B's shape a pass of ~96 tokens costs 9-13 ms however few rows it holds (MLX on
CUDA is launch-bound there), so eight turns were 70-110 ms before any first token.

Here the group's histories are copied into one buffer per layer, right-aligned at the
longest history's end (each row's padding on its left, masked), the new tokens written
after it for every row, right-padded to a shared length (the padding after a row's real
tokens, which under the causal mask no real token sees): one pass for the group, in
shapes from a small set (the new-token length padded like a prefill's tail, the buffer a
multiple of 256 columns, core.engines.mlx.bucketed_kv). Each row's RoPE position is its
own history's length. Afterwards each row's cache is a view of its real columns, a
plain KVCache as the alone pass leaves it, and the row joins the batch as before.

Attention in this pass may be computed with plain matmuls and a softmax
(`plain_attention`) rather than MLX's fused kernel: on CUDA the fused one builds a cuDNN
graph for every new (rows, tokens, keys) shape it meets, 60-130 ms on an H200, and a
conversation's history reaches a new 256-column bucket every turn or two.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from core.engines.mlx.bucketed_kv import key_bucket
from core.engines.mlx.single import PREFILL_QUANTUM, tail_bucket

# The group's buffers (every layer's keys and values for every row, padded) stay under
# this many bytes; a bigger group is prefilled alone, row by row.
GROUP_BYTES = 4 * 1024**3


class GroupKV:
    """One layer of the group pass: rows' histories right-aligned at column `end`, the
    new tokens written from there, attention shown the whole bucketed buffer."""

    def __init__(self, layers: list[KVCache], width: int, rows: int) -> None:
        lengths = [c.offset for c in layers]
        self.end = max(lengths)
        self.pads = [self.end - n for n in lengths] + [self.end] * (rows - len(layers))
        k0, v0 = layers[0].keys, layers[0].values
        self.keys = mx.zeros((rows, k0.shape[1], width, k0.shape[3]), k0.dtype)
        self.values = mx.zeros((rows, v0.shape[1], width, v0.shape[3]), v0.dtype)
        for i, c in enumerate(layers):
            if c.offset:
                self.keys[i : i + 1, :, self.pads[i] : self.end, :] = c.keys[..., : c.offset, :]
                self.values[i : i + 1, :, self.pads[i] : self.end, :] = c.values[..., : c.offset, :]
        # RoPE: each row's new tokens start at its own history's length
        self.offset = mx.array([self.end - p for p in self.pads])
        self.pipelined = False  # each layer's work queued as soon as its graph is built

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n = keys.shape[2]
        self.keys[..., self.end : self.end + n, :] = keys
        self.values[..., self.end : self.end + n, :] = values
        if self.pipelined:
            mx.async_eval(self.keys, self.values)
        return self.keys, self.values

    def make_mask(self, n: int, return_array: bool = False, window_size: Any = None) -> mx.array:
        """(rows, 1, n, width): a row's history from its padding on, then causal."""
        cols = mx.arange(self.keys.shape[2])
        history = cols[None, None, None, :] >= mx.array(self.pads)[:, None, None, None]
        causal = cols[None, :] <= mx.arange(self.end, self.end + n)[:, None]
        return history & causal

    def row(self, i: int, new: int) -> KVCache:
        """Row i's cache after the pass (its history and `new` tokens): a plain KVCache
        over a view of the group's buffers."""
        c = KVCache()
        c.keys = self.keys[i : i + 1, :, self.pads[i] : self.end + new, :]
        c.values = self.values[i : i + 1, :, self.pads[i] : self.end + new, :]
        c.offset = self.end + new - self.pads[i]
        return c

    @property
    def state(self) -> tuple[mx.array, mx.array]:
        return self.keys, self.values


def detached(cache: list[Any]) -> list[Any]:
    """`cache` with each plain layer's arrays copied out of whatever buffer they view (a
    row of the group pass kept for later must not keep the whole group's buffers)."""
    for layer in cache:
        if type(layer) is KVCache and layer.keys is not None:
            layer.keys = mx.contiguous(layer.keys)
            layer.values = mx.contiguous(layer.values)
    return cache


def sharing(caches: list[list[Any]], new_tokens: list[int]) -> list[int]:
    """The rows (indices) that share one pass: those with plain KV layers (a rotating
    window or a quantized cache would need a layout of its own) and 1..PREFILL_QUANTUM
    new tokens (one padded piece), when at least two have and the group's buffers stay
    under GROUP_BYTES; else none (each is prefilled alone)."""
    rows = [i for i, (cache, n) in enumerate(zip(caches, new_tokens, strict=True))
            if 0 < n <= PREFILL_QUANTUM and cache
            and all(type(layer) is KVCache and layer.keys is not None and layer.offset
                    for layer in cache)]
    if len(rows) < 2:
        return []
    width = group_width([caches[i] for i in rows], [new_tokens[i] for i in rows])
    per_col = sum(2 * layer.keys.shape[1] * layer.keys.shape[3] * layer.keys.dtype.size
                  for layer in caches[rows[0]])
    return rows if group_rows(len(rows)) * width * per_col <= GROUP_BYTES else []


def group_rows(n: int) -> int:
    """Rows of the pass for n requests: the next power of two (few shapes to meet)."""
    rows = 1
    while rows < n:
        rows *= 2
    return rows


def group_width(caches: list[list[Any]], new_tokens: list[int]) -> int:
    """Columns of the pass's buffers: the longest history and the padded new tokens,
    up to a multiple of 256."""
    return key_bucket(max(c[0].offset for c in caches) + tail_bucket(max(new_tokens)))


_FUSED = mx.fast.scaled_dot_product_attention


@contextlib.contextmanager
def plain_attention(on: bool) -> Iterator[None]:
    """Inside: mx.fast.scaled_dot_product_attention is matmuls and a softmax (see the
    module docstring); mlx_lm's models look it up at every call."""
    if not on:
        yield
        return
    mx.fast.scaled_dot_product_attention = _matmul_attention
    try:
        yield
    finally:
        mx.fast.scaled_dot_product_attention = _FUSED


def _matmul_attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float,
                      mask: Any = None, sinks: Any = None) -> mx.array:
    if sinks is not None or not isinstance(mask, mx.array) or mask.dtype != mx.bool_:
        # not this pass's own (boolean) mask: an additive one means something else
        return _FUSED(q, k, v, scale=scale, mask=mask, sinks=sinks)
    b, heads, n, d = q.shape
    kv_heads, cols = k.shape[1], k.shape[2]
    share = heads // kv_heads  # query heads per key head, stacked along the queries:
    # plain batched matmuls, no key or value copied per query head
    q = (q * scale).reshape(b, kv_heads, share * n, d)
    scores = (q @ k.swapaxes(-1, -2)).reshape(b, kv_heads, share, n, cols)
    scores = mx.where(mask[:, :, None], scores, mx.array(-mx.inf, scores.dtype))
    weights = mx.softmax(scores, axis=-1, precise=True).reshape(b, kv_heads, share * n, cols)
    return (weights @ v).reshape(b, heads, n, v.shape[-1])


def group_pass(model: Any, caches: list[list[Any]], suffixes: list[list[int]],
               matmul_attention: bool, pipelined: bool = False,
               ) -> tuple[mx.array, list[list[KVCache]]]:
    """One pass of every row's new tokens over its history; (the logits at each row's
    last real token, (requests, vocab); each row's cache after it, plain KV layers).
    `pipelined`: the device starts on each layer while the next one's graph is built."""
    lengths = [len(s) for s in suffixes]
    rows = group_rows(len(caches))
    width = group_width(caches, lengths)
    size = tail_bucket(max(lengths))
    layers = [GroupKV([c[j] for c in caches], width, rows) for j in range(len(caches[0]))]
    for layer in layers:
        layer.pipelined = pipelined
    if pipelined:
        mx.async_eval([a for layer in layers for a in layer.state])
    tokens = mx.array([s + [0] * (size - len(s)) for s in suffixes]
                      + [[0] * size] * (rows - len(suffixes)))
    with plain_attention(matmul_attention):
        logits = model(tokens, cache=layers)
    # slices, not a gather: a gather's kernel is compiled on CUDA the first time it is met
    picked = mx.concatenate([logits[i : i + 1, n - 1] for i, n in enumerate(lengths)])
    out = [[layer.row(i, n) for layer in layers] for i, n in enumerate(lengths)]
    return picked, out
