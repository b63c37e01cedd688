"""Benchmark hub downloads: llmdeck's downloader vs plain hf_hub_download, same file, same run.

A loopback fake Hub (tests/fakes/hub_server.py) runs in its own process and serves one
file; each round downloads it into a fresh cache with llmdeck's `download_plan` (resumable
partial file, hash verified while streaming) and with huggingface_hub's `hf_hub_download`
(no resume across processes, no hash check), alternating which goes first. Prints one JSON
object; `download_throughput_ratio` is ours / theirs (median MB/s), target >= 0.9.

--quick: a 64 MB file, 3 rounds (CPU, well under 2 minutes). Default: 512 MB, 5 rounds.

Run: .venv/bin/python bench/hub.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPO = "bench/Big-File-GGUF"
FILE = "big-Q8_0.gguf"


def _make_file(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)


def _ours(cache: Path) -> float:
    from core.hub import download_plan, list_files, plan_download

    start = time.perf_counter()
    result = download_plan(plan_download(list_files(REPO), FILE), cache_dir=cache)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"llmdeck download failed: {result.error}")
    return elapsed


def _theirs(cache: Path, endpoint: str) -> float:
    from huggingface_hub import hf_hub_download

    start = time.perf_counter()
    hf_hub_download(REPO, FILE, cache_dir=str(cache), endpoint=endpoint)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    size_mb, rounds = (64, 3) if args.quick else (512, 5)
    size = size_mb * 1024 * 1024

    work = Path(tempfile.mkdtemp(prefix="llmdeck-bench-hub-"))
    os.environ["LLMDECK_HOME"] = str(work / "home")
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "0"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.pop("HF_TOKEN", None)
    source = work / FILE
    _make_file(source, size)
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.hub_server", "--repo", REPO, str(source)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        endpoint = json.loads(server.stdout.readline())["endpoint"]
        os.environ["HF_ENDPOINT"] = endpoint
        ours, theirs = [], []
        for i in range(rounds + 1):  # round 0 warms both paths and is not counted
            order = ("ours", "theirs") if i % 2 else ("theirs", "ours")
            for who in order:
                cache = work / f"cache-{who}-{i}"
                t = _ours(cache) if who == "ours" else _theirs(cache, endpoint)
                if i:
                    (ours if who == "ours" else theirs).append(size / t / 1e6)
                shutil.rmtree(cache)
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    ours_mbps, theirs_mbps = statistics.median(ours), statistics.median(theirs)
    print(json.dumps({
        "bench": "hub",
        "quick": args.quick,
        "file_mb": size_mb,
        "rounds": rounds,
        "ours_mb_per_s": round(ours_mbps, 1),
        "hf_hub_download_mb_per_s": round(theirs_mbps, 1),
        "download_throughput_ratio": round(ours_mbps / theirs_mbps, 3),
        "ours_verifies_sha256": True,
        "target_ratio": 0.9,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
