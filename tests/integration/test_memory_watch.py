"""Memory watched while models run (issue 45 item 4): under pressure the service unloads
idle models, least recently used first, never one answering a reply; `doctor`'s budget
line counts the models the engine service holds (it said "0.0 GB held by 0 loaded
models" beside its own service line's memory).

Real worker processes (the scripted engine); the machine's available memory is passed to
the watch as a number, the one stand-in here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.workers.memory_watch import MemoryWatch
from core.workers.pool import WorkerPool
from tests.helpers import service_proc as svc

pytestmark = pytest.mark.timeout(120)
GB = 10**9


def _spec(name: str) -> ModelSpec:
    # The busy model's reply lasts 4 s (80 words at 20 a second): it must still be
    # answering when the three looks end (0.5 s after it starts on a box at load 8); the
    # test then waits for it to run out, so a longer reply is only a longer wait (300
    # words held a test process idle for 15 s).
    return ModelSpec(path=name, engine="scripted", options=(
        ("reply", "word " * 80), ("tokens_per_s", 20), ("chunk_chars", 5), ("label", name)))


async def test_pressure_unloads_idle_models_oldest_first_never_a_busy_one() -> None:
    pool = WorkerPool()
    try:
        for key in ("old", "newer", "busy"):
            await pool.load(key, _spec(key), label=key)
        request = GenerationRequest("r", ({"role": "user", "content": "hi"},),
                                    SamplingParams(max_tokens=300))
        reply = pool.generate("busy", request)
        await reply.__anext__()  # answering now
        watch = MemoryWatch(pool)
        calm = await watch.look(available=8 * GB, total=16 * GB)
        assert not calm.pressure and sorted(pool.loaded()) == ["busy", "newer", "old"]
        assert calm.workers_rss_bytes > 0  # what the workers really hold
        low = await watch.look(available=100 * 2**20, total=16 * GB)
        assert low.pressure and low.unloaded == ["old"]
        assert low.trimmed  # the workers were asked to drop their prompt caches first
        assert sorted(pool.loaded()) == ["busy", "newer"]
        await watch.look(available=100 * 2**20, total=16 * GB)
        await watch.look(available=100 * 2**20, total=16 * GB)
        assert pool.loaded() == ["busy"], "the model answering stays"
        assert watch.last.unloaded == ["old", "newer"] and not watch.last.trimmed  # once
        async for _ in reply:  # the reply that was answering runs to its end after a TRIM
            pass
    finally:
        await pool.shutdown()


def test_doctors_budget_line_counts_the_services_models(llmdeck_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from core.doctor import check_memory_budget, check_service

    monkeypatch.setenv("LLMDECK_IN_PROCESS", "0")
    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args())
        svc.wait_for(lambda: "scripted" in check_service().detail, 30, "the model loaded")
        line = check_memory_budget().detail
        assert "held by 1 loaded model (scripted)" in line, line
        assert "really hold" in line


def test_f4s_service_line_says_what_is_free_and_what_went() -> None:
    from core.service.control import status_line

    line = status_line({"pid": 7, "uptime_s": 5, "memory": {
        "available_bytes": 300 * 10**6, "total_bytes": 16 * GB, "pressure": True,
        "unloaded": ["qwen3:4b-4bit"]}})
    assert "0.3 GB free (low)" in line and "unloaded for memory: qwen3:4b-4bit" in line
