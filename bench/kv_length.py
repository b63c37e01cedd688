"""Does a prefill pass pay again for every new history length? (issue 49)

On the H200 a batched later-turn pass over merged caches one token longer than the last
cost 87-904 ms against 30 ms at a length met before (bench/batch_prefill.py), and a lone
96-token pass over each of 8 new histories 561 ms against 64-114 ms again. This times a
lone 96-token pass over a history of a length never met (`new_length_ms`, one per
length) and met before (`same_length_ms`), plain (mlx_lm's KVCache: keys cut at the exact
length, the "causal" mask) and padded (`padded_*`: keys handed to attention up to the next
multiple of 256, the columns past the real ones masked out by an explicit mask), so the
attention meets one key length per 256 tokens of history.

    python bench/kv_length.py            # Qwen3-0.6B shape, bf16, on the GPU
    python bench/kv_length.py --quick    # tiny model on the CPU (the plumbing)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--lengths", type=int, default=6)
    args = ap.parse_args()
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    from bench.mlx_setup import prefill_model, synced_ms

    model, shape = prefill_model(args.quick, "llmdeck-kv-length-")

    class PaddedKV(KVCache):
        """Keys and values up to the next multiple of 256 for attention, masked past the
        real ones."""

        bucket = 256

        def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
            super().update_and_fetch(keys, values)
            size = -(-self.offset // self.bucket) * self.bucket
            if self.keys.shape[2] < size:
                extra = size - self.keys.shape[2]
                pad = (*self.keys.shape[:2], extra, self.keys.shape[3])
                self.keys = mx.concatenate([self.keys, mx.zeros(pad, self.keys.dtype)], axis=2)
                self.values = mx.concatenate([self.values, mx.zeros(pad, self.values.dtype)], axis=2)
            return self.keys[..., :size, :], self.values[..., :size, :]

        def make_mask(self, n: int, return_array: bool = False, window_size: Any = None) -> Any:
            end = self.offset + n
            size = -(-end // self.bucket) * self.bucket
            return mx.arange(size)[None] <= mx.arange(self.offset, end)[:, None]

    base = make_prompt_cache(model)
    model(mx.array([[(i * 7919) % 1000 + 10 for i in range(2300 + args.lengths + 2)]]), cache=base)
    mx.eval([c.state for c in base])
    suffix = mx.array([[(i * 31) % 900 + 20 for i in range(96)]])

    def pass_over(length: int, padded: bool) -> float:
        cache = []
        for layer in base:
            c = PaddedKV() if padded else KVCache()
            c.keys = mx.contiguous(layer.keys[..., :length, :])
            c.values = mx.contiguous(layer.values[..., :length, :])
            c.offset = length
            cache.append(c)
        mx.eval([c.state for c in cache])
        mx.synchronize()
        t = time.perf_counter()
        y = mx.argmax(model(suffix, cache=cache)[:, -1, :], axis=-1)
        y.item()
        return round((time.perf_counter() - t) * 1000, 2)

    out: dict[str, Any] = {"bench": "kv_length", "device": str(mx.default_device())}
    for padded in (False, True):
        key = "padded_" if padded else ""
        first = [pass_over(2300 + i + (10 if padded else 0), padded) for i in range(args.lengths)]
        again = [pass_over(2300 + i + (10 if padded else 0), padded) for i in range(args.lengths)]
        out[f"{key}new_length_ms"] = first
        out[f"{key}same_length_ms"] = again
    a = make_prompt_cache(model)
    b = [PaddedKV() for _ in base]
    for plain, pad, layer in zip(a, b, base, strict=True):
        for c in (plain, pad):
            c.keys = mx.contiguous(layer.keys[..., :2300, :])
            c.values = mx.contiguous(layer.values[..., :2300, :])
            c.offset = 2300
    la = model(suffix, cache=a)[:, -1, :]
    lb = model(suffix, cache=b)[:, -1, :]
    out["padded_matches_plain"] = mx.argmax(la, axis=-1).item() == mx.argmax(lb, axis=-1).item()
    out["nan_plain_padded"] = [bool(mx.any(mx.isnan(la)).item()), bool(mx.any(mx.isnan(lb)).item())]
    out["padded_max_logit_diff"] = round(float(mx.max(mx.abs(la.astype(mx.float32)
                                                              - lb.astype(mx.float32)))), 4)
    # the pieces of one attention layer at new history lengths (first time each)
    h, kvh, d = (shape["num_attention_heads"], shape["num_key_value_heads"],
                 shape.get("head_dim", shape["hidden_size"] // shape["num_attention_heads"]))
    dt = mx.float32 if args.quick else mx.bfloat16
    q = mx.random.normal((1, h, 96, d)).astype(dt)
    k = mx.random.normal((1, kvh, 96, d)).astype(dt)
    buf = mx.zeros((1, kvh, 2816, d), dt)
    mx.eval(q, k, buf)

    def once(fn: Any) -> float:
        return synced_ms(lambda: mx.eval(fn()))

    lengths = [2400 + 3 * i for i in range(4)]
    out["op_rope_new_offset_ms"] = [once(lambda n=n: mx.fast.rope(q, d, traditional=False, base=1e6,
                                                                  scale=1.0, offset=n)) for n in lengths]
    out["op_rope_array_offset_ms"] = [once(lambda n=n: mx.fast.rope(
        q, d, traditional=False, base=1e6, scale=1.0, offset=mx.array(n))) for n in lengths]
    out["op_slice_update_new_start_ms"] = [once(lambda n=n: _set(buf, k, n)) for n in lengths]
    out["op_sdpa_causal_new_length_ms"] = [once(lambda n=n: mx.fast.scaled_dot_product_attention(
        q, buf[..., : n + 96, :], buf[..., : n + 96, :], scale=0.1, mask="causal"))
        for n in lengths]
    out["op_sdpa_causal_same_length_ms"] = [once(lambda n=n: mx.fast.scaled_dot_product_attention(
        q, buf[..., : n + 96, :], buf[..., : n + 96, :], scale=0.1, mask="causal"))
        for n in lengths]
    out["op_sdpa_boolmask_bucketed_ms"] = [once(lambda n=n: mx.fast.scaled_dot_product_attention(
        q, buf[..., :2560, :], buf[..., :2560, :], scale=0.1,
        mask=mx.arange(2560)[None] <= mx.arange(n, n + 96)[:, None])) for n in lengths]
    print(json.dumps(out, indent=1))


def _set(buf: Any, k: Any, n: int) -> Any:
    out = buf[...]
    out[..., n : n + k.shape[2], :] = k
    return out


if __name__ == "__main__":
    main()
