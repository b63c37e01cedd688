"""Where a batch-1 decode step's time goes (issue 49 item 3), and what mx.compile buys.

On a GPU, MLX at batch 1 is launch-bound: a 0.6B model's step is a few hundred small
kernels, each queued by Python. This times, on one random-weight model:

- `graph_build_ms`: building one step's graph in Python (the model's forward, no eval);
- `eager_sync_ms`: one step built and evaluated, then its token read (no overlap);
- `eager_pipelined_ms`: mlx-lm's loop (step n+1 queued before step n's token is read);
- `sample_*_ms`: sampling alone on one row of logits (argmax; categorical at T=0.7);
- `compiled_sync_ms` / `compiled_pipelined_ms`: the same step through mx.compile, with a
  fixed-size cache (position as an array, a mask, keys and values updated in place), so
  one compiled graph serves every position; sampling (argmax) fused into it;
- `compiled_pipelined_all_ms`: pipelined with the cache buffers queued beside the token;
- `compiled_matches_eager`: the greedy tokens of both agree over the timed steps;
- `bandwidth_bound_ms`: weight bytes / HBM bandwidth (`--hbm-gbps`, H200: 4800).

    python bench/decode_step.py                    # qwen3-0.6b shape, bf16 (a GPU)
    python bench/decode_step.py --shape tiny --cpu # the plumbing, on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402


class StaticCache:
    """A fixed-size KV cache whose position is an array: one compiled graph for every
    step (mlx-lm's KVCache slices by a Python int, a new graph each position)."""

    def __init__(self, keys: mx.array, values: mx.array, pos: mx.array) -> None:
        self.keys, self.values, self.pos = keys, values, pos

    @property
    def offset(self) -> mx.array:
        return self.pos

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        self.keys = mx.slice_update(self.keys, k, self.pos, axes=(2,))
        self.values = mx.slice_update(self.values, v, self.pos, axes=(2,))
        return self.keys, self.values

    def make_mask(self, n: int, return_array: bool = False, window_size: Any = None) -> mx.array:
        return (mx.arange(self.keys.shape[2]) <= self.pos)[None, None, None, :]


def _times(fn: Any, steps: int) -> float:
    """Median ms of fn() over `steps` calls (each call one step, synchronised)."""
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("tiny", "qwen3-0.6b"), default="qwen3-0.6b")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=512, help="tokens prefilled first")
    ap.add_argument("--capacity", type=int, default=2048, help="the static cache's size")
    ap.add_argument("--hbm-gbps", type=float, default=4800.0)
    args = ap.parse_args(argv)
    if args.cpu:
        mx.set_default_device(mx.cpu)
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    gpu = args.shape == "qwen3-0.6b"
    folder = Path(tempfile.gettempdir()) / f"llmdeck-bench-decode-{args.shape}"
    if not (folder / "config.json").exists():
        build_model_dir(folder, QWEN3_0_6B_SHAPE if gpu else QWEN3_SHAPE, seed=3,
                        dtype="bfloat16" if gpu else "float32")
    model, _ = load_model(folder)
    weight_bytes = sum(v.nbytes for _, v in __import__("mlx.utils", fromlist=["x"])
                       .tree_flatten(model.parameters()))
    prompt = mx.array([(i * 7919) % 1000 + 10 for i in range(args.prompt)])[None]

    # -- eager, mlx-lm's KVCache -----------------------------------------------------
    cache = make_prompt_cache(model)
    logits = model(prompt, cache=cache)[:, -1, :]
    y = mx.argmax(logits, axis=-1)
    mx.eval(y)
    state = {"y": y}

    def build() -> mx.array:
        return model(state["y"][:, None], cache=cache)[:, -1, :]

    def eager_sync() -> None:
        state["y"] = mx.argmax(build(), axis=-1)
        mx.eval(state["y"])
        state["y"].item()

    for _ in range(20):
        eager_sync()
    # graph building alone (then evaluated, outside the timing, to keep the cache sane)
    builds = []
    for _ in range(min(50, args.steps)):
        t = time.perf_counter()
        out = mx.argmax(build(), axis=-1)
        builds.append((time.perf_counter() - t) * 1000)
        mx.eval(out)
        state["y"] = out
    eager_sync_ms = _times(eager_sync, args.steps)

    def pipelined(step: Any, first: mx.array, n: int) -> tuple[float, list[int]]:
        y, tokens = first, []
        mx.async_eval(y)
        t = time.perf_counter()
        for _ in range(n):
            nxt = step(y)
            mx.async_eval(nxt)
            tokens.append(y.item())
            y = nxt
        return (time.perf_counter() - t) * 1000 / n, tokens

    eager_pipe_ms, _ = pipelined(lambda y: mx.argmax(model(y[:, None], cache=cache)[:, -1, :], axis=-1),
                                 state["y"], args.steps)

    # -- sampling alone ------------------------------------------------------------------
    row = mx.random.normal((1, logits.shape[-1])).astype(logits.dtype)
    mx.eval(row)
    sample_argmax = _times(lambda: mx.argmax(row, axis=-1).item(), 50)
    sample_cat = _times(lambda: mx.random.categorical(row * (1 / 0.7)).item(), 50)

    # -- compiled, a static cache --------------------------------------------------------
    fresh = make_prompt_cache(model)
    first_logits = model(prompt, cache=fresh)[:, -1, :]
    cap = max(args.capacity, args.prompt + args.steps + 64)
    kv: list[mx.array] = []
    for c in fresh:
        for a in (c.keys, c.values):
            buf = mx.zeros((*a.shape[:2], cap, a.shape[3]), a.dtype)
            kv.append(mx.slice_update(buf, a[:, :, : args.prompt], mx.array([0]), axes=(2,)))
    mx.eval(kv)
    n_layers = len(fresh)

    def step(token: mx.array, pos: mx.array, *bufs: mx.array) -> tuple[mx.array, ...]:
        caches = [StaticCache(bufs[2 * i], bufs[2 * i + 1], pos) for i in range(n_layers)]
        out = model(token[:, None], cache=caches)[:, -1, :]
        nxt = mx.argmax(out, axis=-1)
        return (nxt, *[a for c in caches for a in (c.keys, c.values)])

    compiled = mx.compile(step)
    y0 = mx.argmax(first_logits, axis=-1)
    cstate = {"y": y0, "pos": args.prompt, "kv": kv}

    def compiled_call(y: mx.array) -> mx.array:
        out = compiled(y, mx.array([cstate["pos"]]), *cstate["kv"])
        cstate["kv"] = list(out[1:])
        cstate["pos"] += 1
        return out[0]

    def compiled_sync() -> None:
        cstate["y"] = compiled_call(cstate["y"])
        cstate["y"].item()

    # agreement: greedy tokens from the same prefill, eager vs compiled
    check = make_prompt_cache(model)
    e_y = mx.argmax(model(prompt, cache=check)[:, -1, :], axis=-1)
    e_tokens, c_tokens = [], []
    for _ in range(16):
        e_tokens.append(e_y.item())
        e_y = mx.argmax(model(e_y[:, None], cache=check)[:, -1, :], axis=-1)
    c_y = y0
    for _ in range(16):
        c_tokens.append(c_y.item())
        c_y = compiled_call(c_y)
    for _ in range(10):
        compiled_sync()
    compiled_sync_ms = _times(compiled_sync, args.steps)
    compiled_pipe_ms, _ = pipelined(compiled_call, cstate["y"], args.steps)

    # the same, with the cache buffers queued beside the token (the pipelined loop above
    # queues the token alone)
    def pipelined_all(n: int) -> float:
        y = cstate["y"]
        mx.async_eval(y, *cstate["kv"])
        t = time.perf_counter()
        for _ in range(n):
            nxt = compiled_call(y)
            mx.async_eval(nxt, *cstate["kv"])
            y.item()
            y = nxt
        cstate["y"] = y
        return (time.perf_counter() - t) * 1000 / n

    compiled_pipe_all_ms = pipelined_all(args.steps)

    result = {
        "bench": "decode_step",
        "device": str(mx.default_device()),
        "model": f"random {args.shape} ({'bf16' if gpu else 'float32'})",
        "prompt_tokens": args.prompt,
        "weight_bytes": weight_bytes,
        "bandwidth_bound_ms": round(weight_bytes / (args.hbm_gbps * 1e9) * 1000, 3),
        "graph_build_ms": round(statistics.median(builds), 3),
        "eager_sync_ms": round(eager_sync_ms, 3),
        "eager_pipelined_ms": round(eager_pipe_ms, 3),
        "sample_argmax_ms": round(sample_argmax, 3),
        "sample_categorical_ms": round(sample_cat, 3),
        "compiled_sync_ms": round(compiled_sync_ms, 3),
        "compiled_pipelined_ms": round(compiled_pipe_ms, 3),
        "compiled_pipelined_all_ms": round(compiled_pipe_all_ms, 3),
        "compiled_over_eager_pipelined": round(compiled_pipe_ms / eager_pipe_ms, 3),
        "compiled_sync_over_eager_pipelined": round(compiled_sync_ms / eager_pipe_ms, 3),
        "compiled_matches_eager": e_tokens == c_tokens,
        "static_cache_capacity": cap,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
