"""Prefill passes that show attention one key length per 256 tokens of history (issue 49).

MLX on CUDA builds an attention plan for every new key length (and buffer layout) a
prefill pass meets: on an H200 a 96-token pass over a history of a length never seen cost
60-130 ms against 9-13 ms again (bench/kv_length.py), and a conversation's history has a
new length every turn. Here, for the pass only, each plain KV layer keeps its keys in a
buffer whose size is a multiple of 256 and hands attention the keys up to the next such
multiple, the columns past the real ones masked out: the same attention result, and a
shape met again on every turn inside the same 256 tokens. Decoding is untouched: the
layers go back to mlx_lm's KVCache after the pass.

On by default on CUDA only (engine option bucketed_kv, core.engines.mlx.device_defaults).
On the H200 the op alone (attention over a fixed 256-multiple buffer, a boolean mask) met a
new history length in 0.3-0.6 ms against 63-74 ms with the "causal" mask at the exact
length; the buffer is sized in 256s too, since a buffer of the history's own length still
paid 80 ms per length. End to end there (issue 49): later-turn p50 183-185 ms against
224-225 in process (bench/later_turn.py), 171 against 176 ms over HTTP (bench/chat.py).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

KEY_BUCKET = 256


def key_bucket(n: int) -> int:
    return -(-n // KEY_BUCKET) * KEY_BUCKET


class BucketedKV(KVCache):
    """A plain KV layer whose buffer and attention keys come in multiples of KEY_BUCKET."""

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev = self.offset
        end = prev + keys.shape[2]
        held = 0 if self.keys is None else self.keys.shape[2]
        if self.keys is None or end > held or held % KEY_BUCKET:
            size = key_bucket(max(end, held))
            b, h, _, dk = keys.shape
            new_k = mx.zeros((b, h, size, dk), keys.dtype)
            new_v = mx.zeros((b, h, size, values.shape[3]), values.dtype)
            if prev and self.keys is not None:
                new_k[..., :prev, :] = self.keys[..., :prev, :]
                new_v[..., :prev, :] = self.values[..., :prev, :]
            self.keys, self.values = new_k, new_v
        self.keys[..., prev:end, :] = keys
        self.values[..., prev:end, :] = values
        self.offset = end
        shown = key_bucket(end)
        return self.keys[..., :shown, :], self.values[..., :shown, :]

    def make_mask(self, n: int, return_array: bool = False, window_size: Any = None) -> mx.array:
        """Causal over the real keys, nothing past them (called before the update)."""
        end = self.offset + n
        return mx.arange(key_bucket(end))[None] <= mx.arange(self.offset, end)[:, None]


def to_bucketed(cache: list[Any]) -> None:
    """Turn each plain layer of `cache` (in place) into a BucketedKV over the same arrays."""
    for i, layer in enumerate(cache):
        if type(layer) is KVCache:
            b = BucketedKV()
            b.keys, b.values, b.offset = layer.keys, layer.values, layer.offset
            cache[i] = b


def to_plain(cache: list[Any]) -> None:
    """The reverse, after the pass: mlx_lm's KVCache over the same arrays."""
    for i, layer in enumerate(cache):
        if type(layer) is BucketedKV:
            c = KVCache()
            c.keys, c.values, c.offset = layer.keys, layer.values, layer.offset
            cache[i] = c
