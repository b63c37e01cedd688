"""Benchmark the vision worker: time to the first caption token, cold and warm, and the
memory the idle unload gives back.

Prints one JSON object. Cold: from the first caption request with no process (spawn,
import mlx-vlm, load the model) to the first caption piece on the app's loop. Warm: the
same for a new picture with the model loaded (median of the runs). The raw library in
the same run: mlx_vlm.load + our input preparation + stream_generate in a plain process,
timed to its first piece (its load and first-token times separately), so
`raw_over_ours_warm_ttft_ratio` (raw / ours, higher is better, 1.0 = no overhead) shows
what the process boundary and the pipe cost per caption. Memory: the worker's RSS and
USS (its own pages) while loaded; the idle unload ends the process, so its USS is what
returns (the system's available memory before and after is printed too, but other
programs move it).

--quick builds the tiny random-weight LLaVA of the tests (CPU, well under a minute);
--model PATH times a real mlx-vlm folder.

Run: .venv/bin/python bench/vision.py --quick
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RAW = """
import sys, time, json
t0 = time.perf_counter()
from core.engines.vlm import load_vlm
from core.vision.vlm import stream_caption
model, processor = load_vlm(sys.argv[1])
loaded = time.perf_counter()
out = {"load_ms": (loaded - t0) * 1000, "ttft_ms": []}
for path in sys.argv[2:]:
    t = time.perf_counter()
    for _piece in stream_caption(model, processor, [path], "Describe this image.", 8):
        out["ttft_ms"].append((time.perf_counter() - t) * 1000)
        break
print(json.dumps(out))
"""


def pictures(folder: Path, n: int) -> list[str]:
    from core.vision import prepare_image
    from tests.fixtures.images import make_image

    out = []
    for i in range(n):
        src = make_image(folder / f"p{i}.png", 64 + 8 * i, 48 + 4 * i)
        out.append(prepare_image(src, max_bytes=1 << 24, folder=folder).path)
    return out


async def ours(model: str, paths: list[str]) -> dict[str, float]:
    import psutil

    from core.vision.worker import VisionWorker

    worker = VisionWorker(model, idle_s=0.5)

    async def first_piece(path: str) -> float:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[float] = loop.create_future()
        t = time.perf_counter()

        def on_delta(_piece: str) -> None:
            if not got.done():
                got.set_result((time.perf_counter() - t) * 1000)

        await worker.caption([path], "Describe this image.", max_tokens=8, on_delta=on_delta)
        return got.result()

    try:
        cold = await first_piece(paths[0])
        warm = [await first_piece(p) for p in paths[1:]]
        proc = psutil.Process(worker.pid)
        rss, uss, pid = proc.memory_info().rss, proc.memory_full_info().uss, proc.pid
        before = psutil.virtual_memory().available
        t = time.perf_counter()
        while worker.state != "unloaded" and time.perf_counter() - t < 30:
            await asyncio.sleep(0.05)
        unload_s = time.perf_counter() - t
        await asyncio.sleep(0.3)  # the kernel takes the exited process's pages back
        after = psutil.virtual_memory().available
    finally:
        await worker.shutdown()
    return {"cold_ttft_ms": cold, "warm": warm, "rss": rss, "uss": uss,
            "returned": after - before, "unload_after_idle_s": unload_s,
            "gone": not psutil.pid_exists(pid)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny random LLaVA on CPU")
    parser.add_argument("--model", help="an mlx-vlm model folder")
    parser.add_argument("--runs", type=int, default=5, help="warm captions timed")
    args = parser.parse_args()
    if not args.quick and not args.model:
        parser.error("give --quick or --model PATH")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.model:
            model = args.model
        else:
            from tests.fixtures.vlm_models import build_tiny_llava

            model = str(build_tiny_llava(folder / "tiny-llava"))
        paths = pictures(folder, args.runs + 1)
        mine = asyncio.run(ours(model, paths))
        t = time.perf_counter()
        raw_out = subprocess.run([sys.executable, "-c", RAW, model, *paths], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
        raw_total = (time.perf_counter() - t) * 1000
        raw = json.loads(raw_out.strip().splitlines()[-1])
    warm_ours = statistics.median(mine["warm"])
    warm_raw = statistics.median(raw["ttft_ms"][1:])
    mib = 1024 * 1024
    print(json.dumps({
        "model": Path(model).name,
        "cold_first_caption_token_ms": round(mine["cold_ttft_ms"], 1),
        "warm_first_caption_token_p50_ms": round(warm_ours, 1),
        "raw_load_ms": round(raw["load_ms"], 1),
        "raw_cold_first_token_ms": round(raw["load_ms"] + raw["ttft_ms"][0], 1),
        "raw_process_total_ms": round(raw_total, 1),
        "raw_warm_first_token_p50_ms": round(warm_raw, 1),
        "raw_over_ours_warm_ttft_ratio": round(warm_raw / warm_ours, 3),
        "worker_rss_mib_loaded": round(mine["rss"] / mib, 1),
        # USS: the worker's own pages, all returned when it exits at the idle unload.
        "worker_uss_mib_returned_by_unload": round(mine["uss"] / mib, 1),
        "worker_process_gone_after_unload": mine["gone"],
        # The system's available memory before/after: noisy on a shared machine.
        "system_available_delta_mib": round(mine["returned"] / mib, 1),
        "unload_after_idle_s": round(mine["unload_after_idle_s"], 2),
        "idle_timeout_s": 0.5,
        "warm_runs": len(mine["warm"]),
    }))


if __name__ == "__main__":
    main()
