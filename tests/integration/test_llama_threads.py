"""Two llama.cpp workers of one model share the cores (core/engines/llama_params.py).

The bundled Gemma loaded as replica 0 and replica 1 of two, as the pool starts them:
each llama_cpp.Llama gets its share of this machine's cores, the shares add up to the
cores, and the engine's info (what a worker reports to the status pane) says how many.
Before, each replica took every core, whatever its siblings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines.base import ModelSpec
from core.engines.llama_params import usable_cores
from core.engines.llamacpp import LlamaCppEngine

pytestmark = pytest.mark.slow


def _threads(gguf: Path, options: tuple[tuple[str, object], ...]) -> tuple[int, int]:
    engine = LlamaCppEngine(ModelSpec(str(gguf), "llamacpp", context_size=256, options=options))
    try:
        return engine.info()["threads"], engine._llm.n_threads  # what llama.cpp was given
    finally:
        engine.close()


def test_two_replicas_split_the_cores_and_say_so(bundled_gguf: Path) -> None:
    cores = usable_cores()
    first = _threads(bundled_gguf, (("replicas", 2), ("replica", 0)))
    second = _threads(bundled_gguf, (("replicas", 2), ("replica", 1)))
    assert first[0] == first[1] and second[0] == second[1]
    assert first[0] + second[0] == max(cores, 2)
    assert min(first[0], second[0]) >= 1


def test_the_threads_option_still_sets_the_count(bundled_gguf: Path) -> None:
    assert _threads(bundled_gguf, (("threads", 1), ("replicas", 2), ("replica", 0))) == (1, 1)


async def test_the_pools_two_replicas_each_take_their_share_and_show_it(bundled_gguf: Path) -> None:
    """Through the pool as the app loads it (two replicas by default): each worker is told
    its place, so llama.cpp gets half the cores each, and the status rows (F4, `llmdeck
    workers`) say so. Before, the pool told its workers nothing and each took every core."""
    from core.workers.pool import WorkerPool
    from core.workers.status_file import format_table

    cores = usable_cores()
    pool = WorkerPool()
    try:
        await pool.load("chat", ModelSpec(str(bundled_gguf), "llamacpp", context_size=256),
                        replicas=2)
        rows = pool.status()
        assert len(rows) == 2
        threads = sorted(row.threads for row in rows)
        assert threads == sorted([max(1, cores // 2 + cores % 2), max(1, cores // 2)])
        assert sum(threads) == max(cores, 2)
        table = format_table(rows).splitlines()
        column = table[0].split().index("THREADS")
        assert sorted(int(line.split()[column]) for line in table[1:3]) == threads
    finally:
        await pool.shutdown()
