"""What a later turn's batched prefill costs on mlx_lm's BatchGenerator path (issue 49).

Eight conversations with long cached histories (2,300-3,400 tokens) each send ~85 new
tokens. Prints one JSON object of ms (device synchronised), each timed the first time a
shape is met and again with the same shapes, so a one-off compilation shows as
first-minus-again:

- `merge_ms`: the 8 caches merged into one left-padded BatchKVCache (a copy);
- `batch_prompt_ms`: PromptProcessingBatch.prompt of the 8 suffixes, right-padded to the
  longest (cache growth, the pass, the roll that moves the padding left, clear_cache);
- `batch_pass_ms`: the model pass alone over the merged cache (no roll, no clear_cache);
- `batch_pass_newlen_ms`: the same pass at the same token count over merged caches one
  token longer each time (a new cache length: does it compile again?);
- `solo_pass_ms`: each suffix alone over its own plain cache, in 32-token buckets (the
  single path's shapes), all 8 queued then read: what prefilling them one by one costs;
- `deepcopy_ms`: copy.deepcopy of the merged cache (PromptProcessingBatch.split does it).

    python bench/batch_prefill.py            # Qwen3-0.6B shape, bf16, on the GPU
    python bench/batch_prefill.py --quick    # tiny model on the CPU (the plumbing)
"""

# ruff: noqa: B023 - every timed lambda runs at once, inside its loop turn
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import mlx.core as mx

    from bench.mlx_setup import prefill_model, synced_ms

    model, _ = prefill_model(args.quick, "llmdeck-batch-prefill-")  # the device chosen first:
    import mlx_lm.generate  # noqa: F401 - its stream is made on the default device at import
    from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

    gen = sys.modules["mlx_lm.generate"]
    hist = [2300 + 140 * i for i in range(8)]
    new = [60 + 7 * i for i in range(8)]

    def toks(n: int, salt: int) -> list[int]:
        return [(i * 7919 + salt * 31) % 1000 + 10 for i in range(n)]

    bases = []
    for i, h in enumerate(hist):
        c = make_prompt_cache(model)
        model(mx.array([toks(h, i)]), cache=c)
        mx.eval([x.state for x in c])
        bases.append(c)

    def fresh(extra: int = 0) -> list[list[Any]]:
        out = [copy.deepcopy(c) for c in bases]
        if extra:
            for c in out:
                for layer in c:
                    layer.keys = mx.concatenate([layer.keys[..., : layer.offset, :],
                                                 layer.keys[..., :extra, :]], axis=2)
                    layer.values = mx.concatenate([layer.values[..., : layer.offset, :],
                                                   layer.values[..., :extra, :]], axis=2)
                    layer.offset += extra
        mx.eval([x.state for c in out for x in c])
        return out

    suffixes = [toks(n, 50 + i) for i, n in enumerate(new)]
    result: dict[str, Any] = {"bench": "batch_prefill", "device": str(mx.default_device()),
                              "history": hist, "new": new}
    for key in ("merge_ms", "batch_prompt_ms", "batch_pass_ms", "batch_pass_newlen_ms",
                "solo_pass_ms", "deepcopy_ms"):
        result[key] = []
    for r in range(args.repeats):
        caches = fresh()
        merged: list[Any] = []
        result["merge_ms"].append(synced_ms(lambda: merged.extend(gen._merge_caches(caches))
                                            or mx.eval([c.state for c in merged])))
        ppb = gen.PromptProcessingBatch(model, list(range(8)), fresh(), tokens=[[] for _ in range(8)])
        result["batch_prompt_ms"].append(synced_ms(lambda: ppb.prompt([list(s) for s in suffixes])))
        result["deepcopy_ms"].append(synced_ms(lambda: mx.eval([c.state for c in
                                                                copy.deepcopy(ppb.prompt_cache)])))
        # the pass alone, all rows padded to the longest, no roll
        longest = max(new)
        padded = mx.array([s + [0] * (longest - len(s)) for s in suffixes])
        m2 = gen._merge_caches(fresh())
        result["batch_pass_ms"].append(synced_ms(lambda: mx.eval(model(padded, cache=m2)[:, -1, :])))
        m3 = gen._merge_caches(fresh(r + 1))
        mx.eval([c.state for c in m3])
        result["batch_pass_newlen_ms"].append(
            synced_ms(lambda: mx.eval(model(padded, cache=m3)[:, -1, :])))
        solos = fresh()

        def solo() -> None:
            ys = []
            for s, c in zip(suffixes, solos, strict=True):
                size = -(-len(s) // 32) * 32
                x = mx.array([s + [0] * (size - len(s))])
                ys.append(mx.argmax(model(x, cache=c)[:, len(s) - 1, :], axis=-1))
                mx.async_eval(ys[-1])
            [y.item() for y in ys]

        result["solo_pass_ms"].append(synced_ms(solo))
        assert isinstance(merged[0], BatchKVCache)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
