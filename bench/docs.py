"""Benchmark documents: extraction and ingestion pages/s, query latency over 10,000 chunks.

Prints one JSON object. The query path (embed the question with MiniLM, then top-k by
cosine over the index) is timed against a raw numpy brute-force cosine baseline in the
same run (normalise at query time, full argsort), as someone would write it without our
index. `peak_rss_mb` is the peak resident memory of this process, which does all the work
a utility worker would (markitdown, MiniLM, the index). The `utility_*` keys then measure
the real utility worker process: start-up, resident memory with MiniLM loaded, query
embedding through the pipe, and that it stops when idle.

`index_memory` attaches a plain text (0.15 MB with --quick, else 2 MB) the way the
documents worker embeds it, before (32 passages per forward pass, glibc's default heap)
and after (core.docs.embeddings.DEFAULT_BATCH_SIZE, limit_heap_growth), each in a fresh
process whose RSS is sampled every 50 ms from outside: the peak over the loaded model,
and the seconds.

`embed_backends` (bench/embed_backends.py) embeds the same passages (48 with --quick, else
400) with torch, the app's backend, and with the same weights under ONNX Runtime (fp32 and
int8) and OpenVINO (if installed), paired rounds in this process: `embed_onnx_speed_ratio`
is ONNX passages/s over torch's (ours-new over ours-old, higher is better) and
`onnx_top5_same` whether every question's top-5 passages stayed the same, in order.
Measured on the busy 2-core Xeon (1 thread, 8 a pass; a --quick run, 48 passages x 3
rounds, and one of 40 x 2):
ONNX fp32 0.77-0.90x, same top-5 (20/20); ONNX int8 1.35-1.7x but the top-5 changed for
12-16 of 20 questions (the top passage for 2); OpenVINO f32 0.73-1.12x, same top-5;
OpenVINO's default (bf16 on this AMX CPU) 2.9-3.5x, a different top-5 order for 1 of 20.
No backend is both faster and the same, so the app stays on torch.

`--large-text MB [MB ...]` only attaches plain texts of those sizes through the real
documents worker and prints the peak memory of the worker and of this process tree.
10 MB (11,079 passages, 52 min on the 2-core box at a load of 9-10): the worker 584 MB
with MiniLM loaded, 681 MB at the peak (+97 MB); the tree +129 MB (this process receives
the result). The app's tree, 0.9 GiB idle, so peaks near 1.03 GiB (2.1 GiB before).

--quick (CI size, CPU, well under 3 minutes on an idle box): a 25-page PDF and 400 embedded chunks; the
index is filled to 10,000 rows with noisy copies of those real vectors (re-normalised),
since embedding 10,000 chunks on two cores alone takes minutes. Without --quick every one
of the 10,000 chunks is a real embedded chunk.

Run: .venv/bin/python bench/docs.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.embed_backends import compare as compare_backends  # noqa: E402
from core.docs.chunking import Chunk, chunk_sections  # noqa: E402
from core.docs.embeddings import (  # noqa: E402
    DEFAULT_BATCH_SIZE,
    Embedder,
    ensure_model_files,
    limit_heap_growth,
)
from core.docs.extract import Section, extract  # noqa: E402
from core.docs.retrieval import IngestResult, VectorIndex, ingest  # noqa: E402
from tests.fixtures.docs_files import FACTS, filler, make_fact_document, make_pdf  # noqa: E402

INDEX_ROWS = 10_000


def _pct(samples: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(samples) * 1000.0, q)), 3)


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def _numpy_baseline_topk(raw: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Brute-force cosine as written from scratch: normalise per query, full argsort."""
    scores = (raw @ query) / (np.linalg.norm(raw, axis=1) * np.linalg.norm(query))
    return np.argsort(-scores)[:k]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-size run (CPU, < 3 min)")
    parser.add_argument("--large-text", nargs="+", type=float, metavar="MB",
                        help="only attach plain texts of these sizes through the documents "
                             "worker and print the process tree's peak memory")
    parser.add_argument("--index-child", nargs=3, metavar=("BATCH", "HEAP", "PATH"),
                        help=argparse.SUPPRESS)  # one index_memory run, in its own process
    args = parser.parse_args()
    if args.index_child:
        _index_child(int(args.index_child[0]), args.index_child[1] == "1", args.index_child[2])
        return
    if args.large_text:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("LLMDECK_HOME", str(Path(tmp) / "home"))
            print(json.dumps({"large_text": [asyncio.run(_large_text(Path(tmp), mb))
                                             for mb in args.large_text]}))
        return
    pages = 25 if args.quick else 200
    embed_rows = 400 if args.quick else INDEX_ROWS
    queries = 200 if args.quick else 1000

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LLMDECK_HOME", str(Path(tmp) / "home"))
        out: dict[str, object] = {"quick": args.quick, "pages": pages}
        pdf = Path(tmp) / "bench.pdf"
        make_fact_document(pdf, pages=pages)

        import psutil

        proc = psutil.Process()
        out["rss_start_mb"] = round(proc.memory_info().rss / 2**20, 1)
        warm = Path(tmp) / "warm.pdf"
        make_pdf(warm, ["warm up the converters"])
        extract(warm)  # markitdown builds its converters once per process; time steady state
        t0 = time.perf_counter()
        doc = extract(pdf)
        extract_s = time.perf_counter() - t0
        assert not isinstance(doc, Exception) and doc.units == pages, doc
        out["extract_pages_per_s"] = round(pages / extract_s, 2)

        out["rss_before_model_mb"] = round(proc.memory_info().rss / 2**20, 1)
        embedder = Embedder(idle_seconds=0)
        t0 = time.perf_counter()
        embedder.encode(["load"])
        out["model_load_s"] = round(time.perf_counter() - t0, 3)

        t0 = time.perf_counter()
        result = ingest(pdf, embedder=embedder, whole_threshold=0)
        ingest_s = time.perf_counter() - t0
        assert isinstance(result, IngestResult), result
        out["ingest_pages_per_s"] = round(pages / ingest_s, 2)
        out["ingest_chunks"] = len(result.chunks)
        out["embed_chunks_per_s"] = round(len(result.chunks) / max(result.embed_seconds, 1e-9), 2)

        # Build the 10,000-chunk index from real page-sized chunks.
        rng = random.Random(3)
        texts: list[Chunk] = list(result.chunks)
        page = pages
        while len(texts) < embed_rows:
            page += 1
            body = f"Page {page}. " + filler(rng, 9)
            if page % 7 == 0:
                body += " " + FACTS[page % len(FACTS)][0]
            texts.extend(chunk_sections("bench.pdf", [Section(f"p.{page}", body)]))
        texts = texts[:embed_rows]
        extra = embed_rows - len(result.chunks)
        t0 = time.perf_counter()
        if extra > 0:
            fresh = embedder.encode([c.text for c in texts[len(result.chunks) :]])
            vectors = np.vstack([result.vectors, fresh])
        else:
            vectors = result.vectors[:embed_rows]
        embed_s = time.perf_counter() - t0
        if extra > 0:
            out["embed_chunks_per_s"] = round(extra / embed_s, 2)
        chunks = list(texts)
        fill = INDEX_ROWS - len(chunks)
        if fill > 0:
            nprng = np.random.default_rng(5)
            src = np.arange(fill) % embed_rows
            noisy = vectors[src] + nprng.normal(0, 0.05, (fill, vectors.shape[1])).astype(
                np.float32
            )
            noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
            vectors = np.vstack([vectors, noisy]).astype(np.float32)
            chunks.extend(texts[i] for i in src)
        out["index_chunks"] = len(chunks)
        out["embedded_chunks"] = embed_rows

        index = VectorIndex()
        index.add(chunks, vectors)
        # The baseline gets the same vectors, un-normalised as a raw store would keep them.
        scale = np.random.default_rng(6).uniform(0.5, 2.0, (len(vectors), 1)).astype(np.float32)
        raw = vectors * scale

        questions = [
            FACTS[i % len(FACTS)][1] + ("" if i < len(FACTS) else f" ({i})") for i in range(queries)
        ]
        query_lat, search_lat, base_lat, agree = [], [], [], 0
        index.search(embedder.encode_one("warm"), 5)
        for q in questions:
            t0 = time.perf_counter()
            qv = embedder.encode_one(q)
            t1 = time.perf_counter()
            hits = index.search(qv, 5)
            t2 = time.perf_counter()
            base = _numpy_baseline_topk(raw, qv, 5)
            t3 = time.perf_counter()
            query_lat.append(t2 - t0)
            search_lat.append(t2 - t1)
            base_lat.append(t3 - t2)
            agree += int({h.row for h in hits} == {int(i) for i in base})
        out["query_p50_ms"] = _pct(query_lat, 50)
        out["query_p95_ms"] = _pct(query_lat, 95)
        out["query_target_p95_ms"] = 50
        out["search_p50_ms"] = _pct(search_lat, 50)
        out["search_p95_ms"] = _pct(search_lat, 95)
        out["numpy_search_p50_ms"] = _pct(base_lat, 50)
        out["numpy_search_p95_ms"] = _pct(base_lat, 95)
        out["search_qps_ratio"] = round(sum(base_lat) / sum(search_lat), 2)
        out["top5_agreement_with_numpy"] = round(agree / len(questions), 3)

        out["rss_model_loaded_mb"] = round(proc.memory_info().rss / 2**20, 1)
        embedder.unload()
        out["rss_after_unload_mb"] = round(proc.memory_info().rss / 2**20, 1)
        out["peak_rss_mb"] = _peak_rss_mb()
        # After the peak is read: the other backends' sessions are not the worker's memory.
        backends = compare_backends(
            ensure_model_files(), texts[: 48 if args.quick else 400], questions[: len(FACTS)],
            Path(tmp), repeats=3 if args.quick else 5)
        out["embed_backends"] = backends
        out["embed_onnx_speed_ratio"] = backends.get("embed_onnx_speed_ratio")
        out["onnx_top5_same"] = backends.get("onnx_top5_same")
        out.update(asyncio.run(_utility_worker(pdf, pages, questions[:20])))
        out["index_memory"] = _index_memory(Path(tmp), 0.15 if args.quick else 2.0)
        print(json.dumps(out))


def _index_child(batch: int, heap: bool, path: str) -> None:
    """Load MiniLM, say so, wait for the go, ingest `path`, print the seconds."""
    if heap:
        limit_heap_growth()
    embedder = Embedder(idle_seconds=0, batch_size=batch)
    embedder.encode(["load"])
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    result = ingest(path, embedder=embedder, whole_threshold=0)
    assert isinstance(result, IngestResult), result
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                      "chunks": len(result.chunks)}), flush=True)


def _index_memory(tmp: Path, mb: float) -> dict[str, object]:
    """Peak RSS growth over the loaded model and time of ingesting an `mb` MB text, with
    the old embedding settings and the current ones (see the module docstring)."""
    import psutil

    path = _write_text(tmp / "index-memory.txt", mb)
    out: dict[str, object] = {"text_mb": mb}
    for name, batch, heap in (("before", 32, False), ("after", DEFAULT_BATCH_SIZE, True)):
        child = subprocess.Popen(
            [sys.executable, __file__, "--index-child", str(batch), "1" if heap else "0",
             str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        proc = psutil.Process(child.pid)
        time.sleep(0.3)
        base = peak = proc.memory_info().rss
        child.stdin.write("go\n")
        child.stdin.flush()
        while child.poll() is None:
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.Error:
                break
            time.sleep(0.05)
        done = json.loads(child.stdout.readline())
        child.wait()
        out["chunks"] = done["chunks"]
        out[name] = {"batch": batch, "fixed_mmap_threshold": heap,
                     "rss_loaded_mb": round(base / 2**20, 1),
                     "peak_growth_mb": round((peak - base) / 2**20, 1),
                     "seconds": done["seconds"]}
    return out


def _write_text(path: Path, mb: float) -> Path:
    """Plain filler paragraphs, `mb` MB of them."""
    rng = random.Random(11)
    with open(path, "w", encoding="utf-8") as fh:
        size = 0
        while size < mb * 2**20:
            size += fh.write(filler(rng, 9) + "\n\n")
    return path


def _tree_rss(proc) -> int:
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


async def _large_text(tmp: Path, mb: float) -> dict[str, object]:
    """Attach an `mb` MB plain text through the real documents worker, as the app does:
    the peak resident memory of the worker and of this process tree (this process holds
    the result, as the app does before it stores it), sampled every 100 ms from outside."""
    import threading

    import psutil

    from core.docs.worker import UtilityWorker

    path = _write_text(tmp / f"large-{mb}.txt", mb)
    worker = UtilityWorker(idle_s=3600)
    try:
        await worker.encode(["load the model"])
        await asyncio.sleep(0.3)
        me, child = psutil.Process(), psutil.Process(worker.pid)
        base_tree, base_worker = _tree_rss(me), child.memory_info().rss
        peak, stop = [base_tree, base_worker], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss(me))
                try:
                    peak[1] = max(peak[1], child.memory_info().rss)
                except psutil.Error:
                    pass
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        try:
            result = await worker.ingest(path, alias=path.name, whole_threshold=0)
        finally:
            stop.set()
            sampler.join()
        seconds = time.perf_counter() - t0
        assert isinstance(result, IngestResult), result
        return {"text_mb": mb, "chunks": len(result.chunks), "seconds": round(seconds, 1),
                "chunks_per_s": round(len(result.chunks) / seconds, 2),
                "worker_rss_loaded_mb": round(base_worker / 2**20, 1),
                "worker_peak_mb": round(peak[1] / 2**20, 1),
                "tree_rss_loaded_mb": round(base_tree / 2**20, 1),
                "tree_peak_mb": round(peak[0] / 2**20, 1),
                "tree_peak_growth_mb": round((peak[0] - base_tree) / 2**20, 1)}
    finally:
        await worker.shutdown()


async def _utility_worker(pdf: Path, pages: int, questions: list[str]) -> dict[str, object]:
    """The same ingestion in the utility worker process the app uses: its start-up, its
    resident memory with MiniLM loaded, query latency through the pipe (embedding plus
    IPC), and that it goes away once idle (only the process exit returns torch's memory).
    The ingestion is cold: it includes loading markitdown and MiniLM in the fresh process,
    as an app's first attachment does.
    """
    import psutil

    from core.docs.worker import UtilityWorker

    worker = UtilityWorker(idle_s=0.5)
    out: dict[str, object] = {}
    t0 = time.perf_counter()
    await worker.ping()
    out["utility_start_s"] = round(time.perf_counter() - t0, 3)
    proc = psutil.Process(worker.pid)
    out["utility_rss_started_mb"] = round(proc.memory_info().rss / 2**20, 1)
    t0 = time.perf_counter()
    result = await worker.ingest(pdf, whole_threshold=0)
    assert isinstance(result, IngestResult), result
    out["utility_cold_ingest_pages_per_s"] = round(pages / (time.perf_counter() - t0), 2)
    lat = []
    for q in questions:
        t0 = time.perf_counter()
        await worker.encode([q])
        lat.append(time.perf_counter() - t0)
    out["utility_query_embed_p50_ms"] = _pct(lat, 50)
    out["utility_query_embed_p95_ms"] = _pct(lat, 95)
    out["utility_rss_model_loaded_mb"] = round(proc.memory_info().rss / 2**20, 1)
    t0 = time.perf_counter()
    while worker.running and time.perf_counter() - t0 < 30:
        await asyncio.sleep(0.05)
    out["utility_stopped_when_idle"] = not proc.is_running() or proc.status() == "zombie"
    await worker.shutdown()
    return out


if __name__ == "__main__":
    main()
