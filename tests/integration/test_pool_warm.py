"""WorkerPool.warm (issue 33 item 2), with real worker processes (the scripted engine: it
has no `warm`, so the worker must ignore the hint quietly). The MLX end to end is
test_kv_disk_open."""

from __future__ import annotations

import asyncio

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, TextDelta
from core.workers.pool import WorkerPool

pytestmark = pytest.mark.timeout(60)
LONG = "word " * 120


def spec(**options) -> ModelSpec:
    return ModelSpec(path="scripted", engine="scripted", options=tuple(options.items()))


def request(rid: str, session: str | None) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "hi"},),
                             SamplingParams(max_tokens=512), session_id=session)


async def test_warming_never_loads_a_model() -> None:
    pool = WorkerPool()
    try:
        assert not pool.warm("m", request("w", "s"))  # never heard of
        await pool.load("m", spec())
        await pool.release("m")  # known, not loaded (an API client's unload, an eviction)
        assert not pool.warm("m", request("w", "s"))
        await asyncio.sleep(0.2)
        assert pool.pids() == [] and pool.loaded() == []
    finally:
        await pool.shutdown()


async def test_a_warm_goes_to_the_sessions_worker_and_an_engine_without_warm_ignores_it() -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", spec(reply=LONG, tokens_per_s=200), replicas=2)
        pids = sorted(pool.pids())
        busy = pool.generate("m", request("a1", "a"))
        first = await anext(busy)  # session a streams on one worker
        assert isinstance(first, TextDelta)
        held_by_a = pool.worker_for_session("m", "a")
        assert not pool.warm("m", request("wa", "a"))  # its own request serves it already
        assert pool.warm("m", request("wb", "b"))  # the hint is sent ...
        warmed = pool.worker_for_session("m", "b")
        assert warmed is not None and warmed != held_by_a  # ... where b's turn will land
        async for event in busy:  # the scripted engine ignored the hint: a serves on
            last = event
        assert last == Done("stop")
        events = [e async for e in pool.generate("m", request("b1", "b"))]
        assert events[-1] == Done("stop")
        assert pool.worker_for_session("m", "b") == warmed
        assert sorted(pool.pids()) == pids  # no worker died of the message
    finally:
        await pool.shutdown()
