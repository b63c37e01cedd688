"""Indexing a large text stays within a memory bound, with the same top-5 results.

A 10 MB text once took the app's process tree from 0.9 GiB to 2.1 GiB: the documents
worker embedded 32 passages per forward pass (attention alone ~100 MB of activations)
and glibc kept torch's freed batch tensors in its heap, so the worker grew with every
batch (~130 MB per MB of text). This attaches a text through the real utility worker
with the real MiniLM and samples the RSS of this process and its children every 50 ms,
as psutil sees them from outside.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from core.docs.embeddings import ensure_model_files
from core.docs.retrieval import IngestResult, VectorIndex
from core.docs.worker import UtilityWorker
from tests.fixtures.docs_files import FACTS, filler

pytestmark = pytest.mark.slow

TEXT_BYTES = 72 * 1024  # ~80 passages: more than two of the old code's 32-passage passes
# Peak growth of the tree over the worker with MiniLM loaded. Measured: the old code
# 270-350 MB for 0.5-1 MB of text (its batch-32 activations are ~200 MB whatever the
# size), the bounded batches 44 MB for 1 MB. 150 MB fails the first with room for noise.
GROWTH_BOUND_MB = 150


@pytest.fixture
def model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMDECK_HOME", str(tmp_path / "home"))
    return ensure_model_files()


def _text(path: Path) -> tuple[Path, str]:
    """Filler paragraphs with one fact in the middle; returns the fact's question."""
    rng = random.Random(7)
    fact, question = FACTS[2]
    paragraphs, size = [], 0
    while size < TEXT_BYTES:
        paragraphs.append(filler(rng, 9))
        size += len(paragraphs[-1]) + 2
    paragraphs.insert(len(paragraphs) // 2, fact)
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return path, question


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


async def test_indexing_a_large_text_keeps_memory_bounded_and_the_same_top5(
    model_folder: Path, tmp_path: Path
) -> None:
    path, question = _text(tmp_path / "big.txt")
    worker = UtilityWorker(idle_s=120, model_dir=model_folder)
    try:
        await worker.encode(["load the model"])  # the baseline has MiniLM loaded
        await asyncio.sleep(0.3)
        me = psutil.Process()
        base = _tree_rss(me)
        peak, stop = [base], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss(me))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            result = await worker.ingest(path, alias="big.txt", whole_threshold=1500)
        finally:
            stop.set()
            sampler.join()
        assert isinstance(result, IngestResult), result
        assert len(result.chunks) > 64
        growth_mb = (peak[0] - base) / 2**20
        assert growth_mb < GROWTH_BOUND_MB, f"indexing grew the tree by {growth_mb:.0f} MB"
        query = await worker.encode([question])
        # The same vectors as each passage embedded alone (one per pass: no batch, no
        # padding), on the top ten, the shortest and longest passages (sentence-transformers
        # batches by length, so these are the least and most padded: a padding or masking
        # slip moves them first) and a fixed sample of the rest: bounded batches must not
        # move a passage, so the top-5 cannot move either. Asked of the same worker, one
        # text a call: a second copy of MiniLM in this process cost a quarter of the test.
        new_index = VectorIndex()
        new_index.add(result.chunks, result.vectors)
        new_hits = new_index.search(query[0], 10)
        by_length = sorted(range(len(result.chunks)), key=lambda r: len(result.chunks[r].text))
        rows = sorted({h.row for h in new_hits} | {by_length[0], by_length[-1]}
                      | set(random.Random(3).sample(range(len(result.chunks)), 6)))
        alone = [(await worker.encode([result.chunks[r].text]))[0] for r in rows]
    finally:
        await worker.shutdown()

    assert np.allclose(np.asarray(result.vectors)[rows], np.asarray(alone), atol=1e-4)
    assert FACTS[2][0] in new_hits[0].chunk.text
