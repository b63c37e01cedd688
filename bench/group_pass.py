"""Eight cached turns' first tokens: one pass each, or one pass for the group (issue 49).

Eight conversations with long cached histories (2,300-3,280 tokens) each send 60-109 new
tokens, as a chat client's conversations in lock-step do. Prints one JSON object of ms
(device synchronised, first tokens read), each timed at a history length never met
(`*_new_ms`: every history 256 tokens longer than the last time, so each pass meets a new
key bucket) and again at the same lengths (`*_again_ms`):

- `alone`: each row prefilled alone over its own history as the engine's alone path does
  (BucketedKV, the new tokens padded to a multiple of 32), all queued, then read;
- `group_fused`: one pass of the group (core.engines.mlx.cached_group) with MLX's fused
  attention (cuDNN on CUDA: a graph built per new shape);
- `group_matmul`: the same pass with attention as matmuls and a softmax;
- `*_pipelined`: the device starts on each layer while the next one's graph is built;
- `build`: the group's buffers alone (every layer's histories copied in);
- `matches`: the greedy first tokens of the group passes agree with the alone passes'.

    python bench/group_pass.py            # Qwen3-0.6B shape, bf16, on the GPU
    python bench/group_pass.py --quick    # tiny model on the CPU (the plumbing)
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
    ap.add_argument("--lengths", type=int, default=3, help="new history lengths to meet")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    import mlx.core as mx

    from bench.mlx_setup import prefill_model

    model, _ = prefill_model(args.quick, "llmdeck-group-pass-")
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    from core.engines.mlx.bucketed_kv import to_bucketed, to_plain
    from core.engines.mlx.cached_group import GroupKV, group_pass, group_rows, group_width
    from core.engines.mlx.single import tail_bucket

    rows = args.rows
    hist = [2300 + 140 * i for i in range(rows)]
    new = [60 + 7 * i for i in range(rows)]
    longest = max(hist) + 256 * (args.lengths + 1)

    def toks(n: int, salt: int) -> list[int]:
        return [(i * 7919 + salt * 31) % 1000 + 10 for i in range(n)]

    bases = []
    for i in range(rows):
        c = make_prompt_cache(model)
        model(mx.array([toks(longest, i)]), cache=c)
        mx.eval([x.state for x in c])
        bases.append(c)
    suffixes = [toks(n, 100 + i) for i, n in enumerate(new)]

    def caches(extra: int) -> list[list[Any]]:
        out = []
        for i, base in enumerate(bases):
            n = hist[i] + extra
            layers = []
            for b in base:
                c = KVCache()
                c.keys, c.values, c.offset = b.keys[..., :n, :], b.values[..., :n, :], n
                layers.append(c)
            out.append(layers)
        mx.eval([c.keys for cs in out for c in cs])
        return out

    def alone(extra: int) -> tuple[float, list[int]]:
        cs = caches(extra)
        mx.synchronize()
        t = time.perf_counter()
        ys = []
        for cache, suffix in zip(cs, suffixes, strict=True):
            size = tail_bucket(len(suffix))
            to_bucketed(cache)
            logits = model(mx.array([suffix + [0] * (size - len(suffix))]), cache=cache)
            to_plain(cache)
            y = mx.argmax(logits[:, len(suffix) - 1, :], axis=-1)
            mx.async_eval(y)
            ys.append(y)
        got = [y.item() for y in ys]
        return round((time.perf_counter() - t) * 1000, 2), got

    def group(extra: int, matmul: bool, pipelined: bool = False) -> tuple[float, list[int]]:
        cs = caches(extra)
        mx.synchronize()
        t = time.perf_counter()
        logits, _ = group_pass(model, cs, suffixes, matmul, pipelined)
        got = mx.argmax(logits, axis=-1).tolist()
        return round((time.perf_counter() - t) * 1000, 2), got

    def build(extra: int) -> tuple[float, list[int]]:
        """The group's buffers alone: every layer's histories copied in."""
        cs = caches(extra)
        mx.synchronize()
        t = time.perf_counter()
        width = group_width(cs, new)
        layers = [GroupKV([c[j] for c in cs], width, group_rows(rows)) for j in range(len(cs[0]))]
        mx.eval([a for layer in layers for a in layer.state])
        return round((time.perf_counter() - t) * 1000, 2), []

    out: dict[str, Any] = {"bench": "group_pass", "device": str(mx.default_device()),
                           "history": hist, "new": new}
    tokens: dict[str, list[list[int]]] = {}
    kinds = {"alone": alone, "group_fused": lambda e: group(e, False),
             "group_matmul": lambda e: group(e, True),
             "group_matmul_pipelined": lambda e: group(e, True, True),
             "group_fused_pipelined": lambda e: group(e, False, True), "build": build}
    for fn in kinds.values():
        fn(0)  # every kind's fixed shapes once (the tail pieces, the rows)
    for k in range(1, args.lengths + 1):
        for name, fn in kinds.items():
            ms, got = fn(256 * k)
            out.setdefault(f"{name}_new_ms", []).append(ms)
            tokens.setdefault(name, []).append(got)
        for name, fn in kinds.items():
            ms, _ = fn(256 * k)
            out.setdefault(f"{name}_again_ms", []).append(ms)
    out["matches"] = {name: sum(a == b for x, y in zip(got, tokens["alone"], strict=True)
                                for a, b in zip(x, y, strict=True)) / (rows * args.lengths)
                      for name, got in tokens.items() if name != "build"}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
