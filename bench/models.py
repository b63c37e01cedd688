"""Switching models: the next reply's first token, with several models loaded at once
against today's unload-then-load.

Prints one JSON object. Two real MLX models (random weights, built in a child process so
MLX never loads into the app-side process), served by real worker processes through the
pool as the app and `llmdeck serve` use it. Each round times, to the first token of a
short reply on the other model:
- switch_loaded_s: both models loaded (the pool keeps several): a reply on A, then on B;
- switch_unloaded_s: B was unloaded (keep_alive, eviction), A stays: B loads beside A;
- unload_then_load_s: one model at a time, as the app switched before: unload A, load B.
Medians over the rounds. *_ratio figures are ours over theirs as rates (switches per
second), so higher is better.

    python bench/models.py --quick     # tiny models on CPU: 2-3 minutes on a busy 2-core box (each load ~12 s)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.events import Done, Error, TextDelta, Usage  # noqa: E402
from core.workers.pool import WorkerPool  # noqa: E402


def build_models(out: Path, quick: bool) -> list[dict]:
    """Two different architectures, as two models a person switches between."""
    from tests.fixtures.mlx_models import LLAMA_SHAPE, QWEN3_SHAPE, build_model_dir

    shapes = []
    for name, shape, seed in (("a", QWEN3_SHAPE, 1), ("b", LLAMA_SHAPE, 2)):
        shape = dict(shape)
        if not quick:
            shape.update(hidden_size=512, intermediate_size=1536, num_hidden_layers=8)
        build_model_dir(out / name, shape, seed=seed)
        shapes.append({"model_type": shape["model_type"], "hidden_size": shape["hidden_size"],
                       "layers": shape["num_hidden_layers"]})
    return shapes


def spec(folder: Path) -> ModelSpec:
    return ModelSpec(str(folder), "mlx", context_size=1024)


async def first_token(pool: WorkerPool, key: str, tag: str, started: float) -> float:
    """Seconds from `started` to the reply's first token (its end when it wrote none)."""
    request = GenerationRequest(tag, ({"role": "user", "content": "Say hello."},),
                                SamplingParams(temperature=0.0, max_tokens=4))
    seen: float | None = None
    async for event in pool.generate(key, request):
        if isinstance(event, Error):
            raise RuntimeError(f"{key}: {event.message}")
        if seen is None and isinstance(event, TextDelta | Usage | Done):
            seen = time.perf_counter() - started
    assert seen is not None
    return seen


async def ours(models: Path, rounds: int) -> tuple[list[float], list[float]]:
    pool = WorkerPool()
    loaded: list[float] = []
    unloaded: list[float] = []
    try:
        await pool.load("a", spec(models / "a"))
        await pool.load("b", spec(models / "b"))
        await first_token(pool, "a", "warm-a", time.perf_counter())
        await first_token(pool, "b", "warm-b", time.perf_counter())
        for r in range(rounds):
            here, there = ("a", "b") if r % 2 == 0 else ("b", "a")
            await first_token(pool, here, f"l-{r}-{here}", time.perf_counter())
            loaded.append(await first_token(pool, there, f"l-{r}-{there}", time.perf_counter()))
        for r in range(rounds):
            await pool.release("b")  # b gone (idle time out or eviction); a stays loaded
            await first_token(pool, "a", f"u-{r}-a", time.perf_counter())
            unloaded.append(await first_token(pool, "b", f"u-{r}-b", time.perf_counter()))
    finally:
        await pool.shutdown()
    return loaded, unloaded


async def theirs(models: Path, rounds: int) -> list[float]:
    """One model at a time under one key: what Runtime.switch_model did."""
    pool = WorkerPool()
    times: list[float] = []
    try:
        current = "a"
        await pool.load("chat", spec(models / current))
        await first_token(pool, "chat", "warm", time.perf_counter())
        for r in range(rounds):
            target = "b" if current == "a" else "a"
            started = time.perf_counter()
            await pool.unload("chat")
            await pool.load("chat", spec(models / target))
            times.append(await first_token(pool, "chat", f"t-{r}", started))
            current = target
    finally:
        await pool.shutdown()
    return times


def _child(*args: str) -> str:
    return subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny models on CPU, CI-size")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--child", nargs=2, metavar=("OUT", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build_models(Path(args.child[0]), args.child[1] == "quick")))
        return
    rounds = args.rounds or (3 if args.quick else 8)
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        shapes = json.loads(_child("--child", str(models), "quick" if args.quick else "full"))
        assert "mlx" not in sys.modules, "the app-side process must not load MLX"
        their = await theirs(models, rounds)
        loaded, unloaded = await ours(models, rounds)
    med = {name: statistics.median(v) for name, v in (
        ("switch_loaded_s", loaded), ("switch_unloaded_s", unloaded),
        ("unload_then_load_s", their))}
    out: dict[str, object] = {
        "bench": "models", "quick": args.quick, "rounds": rounds, "models": shapes,
        **{k: round(v, 4) for k, v in med.items()},
        "switch_loaded_rate_ratio": round(med["unload_then_load_s"] / med["switch_loaded_s"], 2),
        "switch_unloaded_rate_ratio": round(med["unload_then_load_s"] / med["switch_unloaded_s"], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
