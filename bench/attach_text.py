"""Benchmark attaching large and hostile text: is every step linear, is memory bounded?

Prints one JSON object. For prose .txt files of size S and 4S (--quick: 2 and 8 MB; else
5 and 20 MB) it times our reading (block by block) plus chunking, and raw markitdown
converting the same file in the same run (`read_speed_ratio` = markitdown's time / ours:
higher is better). `*_per_mb_growth` is the time per MB at 4S over the time per MB at S
(1.0 = linear; a superlinear step shows as well above 1), best of 3 runs. Embedding (MiniLM on CPU) is
timed per chunk at two batch counts the same way. The hostile cases: the 99 MiB NUL file
of issue 19 (time to refuse, traced peak memory) and a punctuation flood chunked by ours
and by the first chunker, which kept a span tuple per token (traced peak memory).

Run: .venv/bin/python bench/attach_text.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.docs.chunking import _TOKEN, chunk_sections, chunk_text  # noqa: E402
from core.docs.extract import extract  # noqa: E402

MB = 1024 * 1024
WORDS = ("the committee met on Tuesday and agreed budget for spring fair report data "
         "value model river north station 42 quickly under over").split()


def prose(path: Path, size: int, seed: int = 3) -> Path:
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))) + ".\n"
        lines.append(line)
        total += len(line)
    path.write_text("".join(lines))
    return path


def ours(path: Path) -> tuple[float, float]:
    """(reading, chunking) seconds."""
    t0 = time.perf_counter()
    doc = extract(path, max_bytes=1 << 40)
    t1 = time.perf_counter()
    chunk_sections(path.name, doc.sections)
    return t1 - t0, time.perf_counter() - t1


def markitdown(path: Path) -> float:
    from markitdown import MarkItDown

    converter = MarkItDown(enable_plugins=False)
    t0 = time.perf_counter()
    converter.convert(str(path))
    return time.perf_counter() - t0


def peak(fn) -> tuple[float, float]:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        fn()
        return time.perf_counter() - t0, tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()


def all_spans_chunker(text: str, max_tokens: int = 200, overlap: int = 40) -> int:
    """The first chunker's memory shape: every token span in one list."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    return len(spans) // (max_tokens - overlap) + 1


def embed_ms_per_chunk(counts: tuple[int, int]) -> list[float]:
    from core.docs.embeddings import Embedder

    embedder = Embedder(idle_seconds=0)
    embedder.encode(["warm up"])
    rng = random.Random(5)
    out = []
    for n in counts:
        texts = [" ".join(rng.choice(WORDS) for _ in range(180)) for _ in range(n)]
        t0 = time.perf_counter()
        embedder.encode(texts)
        out.append(1000 * (time.perf_counter() - t0) / n)
    embedder.unload()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI size (CPU, < 3 min)")
    args = parser.parse_args()
    small = 2 if args.quick else 5
    counts = (32, 128) if args.quick else (128, 512)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LLMDECK_HOME", tmp)
        folder = Path(tmp)
        markitdown(prose(folder / "warm.txt", 10_000))  # imports and converter set-up
        read_mb, chunk_mb, md_per_mb = [], [], []
        for size in (small, 4 * small):
            path = prose(folder / f"p{size}.txt", size * MB)
            runs = [ours(path) for _ in range(3)]  # best of 3: the box is shared
            read_mb.append(min(r[0] for r in runs) / size)
            chunk_mb.append(min(r[1] for r in runs) / size)
            md_per_mb.append(min(markitdown(path) for _ in range(3)) / size)
        zeros = folder / "zeros.txt"
        with zeros.open("wb") as f:
            f.truncate(99 * MB)
        nul_s, nul_peak = peak(lambda: extract(zeros, max_bytes=200 * MB))
        flood = "." * (MB // 2)
        _, flood_ours = peak(lambda: chunk_text("d", "", flood))
        _, flood_old = peak(lambda: all_spans_chunker(flood))
        embed = embed_ms_per_chunk(counts)
    print(json.dumps({
        "quick": args.quick,
        "sizes_mb": [small, 4 * small],
        "read_s_per_mb": [round(x, 4) for x in read_mb],
        "read_per_mb_growth": round(read_mb[1] / read_mb[0], 2),
        "markitdown_read_s_per_mb": [round(x, 4) for x in md_per_mb],
        "read_speed_ratio": round(md_per_mb[1] / read_mb[1], 2),
        "chunk_s_per_mb": [round(x, 4) for x in chunk_mb],
        "chunk_per_mb_growth": round(chunk_mb[1] / chunk_mb[0], 2),
        "nul_99mib_refuse_ms": round(1000 * nul_s, 1),
        "nul_99mib_peak_mib": round(nul_peak, 1),
        "flood_512kib_chunk_peak_mib": round(flood_ours, 1),
        "flood_512kib_all_spans_peak_mib": round(flood_old, 1),
        "embed_batch_sizes": list(counts),
        "embed_ms_per_chunk": [round(x, 1) for x in embed],
        "embed_per_chunk_growth": round(embed[1] / embed[0], 2),
    }))


if __name__ == "__main__":
    main()
