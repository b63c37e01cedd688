"""Benchmark the Python sandbox: what a tool run costs on top of a bare worker process.

Ours: core.tools.Sandbox.run (asyncio, a waiting thread, the pipe, the notebook-style cell
with stdout capture and last-expression repr). Theirs: a bare multiprocessing spawn
worker that exec()s the same code and sends the namespace's value back over a Pipe,
timed in the same run. Also the sandbox's cold start and its respawn after a runaway
loop is stopped (what a user waits for after a timeout).

`run_throughput_ratio` = raw p50 / our p50 (ours over theirs in runs per second; higher
is better, 1.0 = no overhead).

Run: .venv/bin/python bench/tools.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stats import pct  # noqa: E402

CODE = "total = sum(range(1000))\ntotal * 2"


def _raw_worker(conn) -> None:  # theirs: the least a separate Python process can do
    namespace: dict = {}
    while True:
        code = conn.recv()
        if code is None:
            return
        exec(compile(code, "<raw>", "exec"), namespace)
        conn.send(repr(namespace.get("total", 0) * 2))


def bench_raw(n: int) -> list[float]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_raw_worker, args=(child,))
    proc.start()
    parent.send("total = 0")
    parent.recv()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        parent.send(CODE)
        parent.recv()
        times.append((time.perf_counter() - t) * 1000)
    parent.send(None)
    proc.join(5)
    return times


async def bench_ours(n: int) -> dict[str, float | list[float]]:
    from core.tools import Sandbox

    sb = Sandbox(timeout_s=1.0, memory_mb=1024)
    t = time.perf_counter()
    await sb.start()
    cold_ms = (time.perf_counter() - t) * 1000
    await sb.run("bench", CODE)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        result = await sb.run("bench", CODE)
        times.append((time.perf_counter() - t) * 1000)
        assert result.value == "999000", result
    await sb.run("bench", "while True:\n    pass")  # stopped at 1 s, then respawned
    t = time.perf_counter()
    after = await sb.run("bench", "1")
    respawn_wait_ms = (time.perf_counter() - t) * 1000
    assert after.ok
    await sb.close()
    return {"times": times, "cold_ms": cold_ms, "respawn_wait_ms": respawn_wait_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (CPU, well under 2 min)")
    args = parser.parse_args()
    n = 100 if args.quick else 1000
    os.environ.setdefault("LLMDECK_HOME", tempfile.mkdtemp(prefix="llmdeck-bench-tools-"))
    raw = bench_raw(n)
    ours = asyncio.run(bench_ours(n))
    times = ours["times"]
    assert isinstance(times, list)
    out = {
        "bench": "tools",
        "runs": n,
        "sandbox_run_p50_ms": round(statistics.median(times), 3),
        "sandbox_run_p95_ms": round(pct(times, 0.95), 3),
        "raw_pipe_exec_p50_ms": round(statistics.median(raw), 3),
        "raw_pipe_exec_p95_ms": round(pct(raw, 0.95), 3),
        "run_throughput_ratio": round(statistics.median(raw) / statistics.median(times), 3),
        "sandbox_cold_start_ms": round(float(ours["cold_ms"]), 1),
        "respawn_after_timeout_wait_ms": round(float(ours["respawn_wait_ms"]), 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
