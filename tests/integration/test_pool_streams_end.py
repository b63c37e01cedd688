"""Every request's stream ends, whatever happens to its worker or model.

Real worker processes (the scripted engine replays a long reply at a known pace). Each
test is one cause that used to leave a stream waiting forever: the model unloaded under it
(a reload; a switch no longer unloads: test_runtime_switch.py), the pool shutting down, an
unload while the model was still loading, a request queued behind another one on a worker
that went away, and Esc on a request that is waiting rather than running.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta
from core.workers.pool import WorkerLoadError, WorkerPool
from tests.helpers.procs import wait_gone

LONG = "word " * 400
ENDS_WITHIN_S = 10.0  # a stream that has not ended by then never will (the reply is 80 s)

pytestmark = pytest.mark.timeout(90)


def spec(**options: object) -> ModelSpec:
    opts = {"reply": LONG, "tokens_per_s": 25, "chunk_chars": 5, **options}
    return ModelSpec(path="scripted", engine="scripted", options=tuple(opts.items()))


def request(rid: str) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "tell me a long story"},),
                             SamplingParams(max_tokens=1000))


async def _collect_until(events, deltas: int, seen: list) -> None:
    """Read events into `seen` until `deltas` text pieces have arrived."""
    async for event in events:
        seen.append(event)
        if sum(isinstance(e, TextDelta) for e in seen) >= deltas:
            return


async def _rest(events, seen: list) -> list:
    """The remaining events, or a failure if the stream does not end in time."""
    async def _drain() -> None:
        async for event in events:
            seen.append(event)

    await asyncio.wait_for(_drain(), ENDS_WITHIN_S)
    return seen


def _text(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_reloading_the_model_mid_reply_ends_the_reply() -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", spec())
        events = pool.generate("m", request("r1"))
        seen: list = []
        await _collect_until(events, 3, seen)
        await asyncio.wait_for(pool.unload("m"), 10)
        await _rest(events, seen)
        assert isinstance(seen[-2], Error) and seen[-2].code == "CANCELLED"
        assert seen[-1] == Done("error")
        assert LONG.startswith(_text(seen)) and _text(seen)
    finally:
        await pool.shutdown()


async def test_shutdown_mid_reply_ends_the_reply_and_leaves_no_process() -> None:
    pool = WorkerPool()
    await pool.load("m", spec())
    pids = pool.pids()
    events = pool.generate("m", request("r1"))
    seen: list = []
    await _collect_until(events, 3, seen)
    await asyncio.wait_for(pool.shutdown(), 10)
    await _rest(events, seen)
    assert seen[-1] == Done("error")
    assert any(isinstance(e, Error) and "closing" in e.message for e in seen)
    assert wait_gone(pids, 5) == []


async def test_a_request_queued_behind_a_reply_ends_when_the_model_is_unloaded() -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", spec(max_concurrency=1))
        first = pool.generate("m", request("r1"))
        seen: list = []
        await _collect_until(first, 2, seen)
        queued: list = []
        waiting = asyncio.ensure_future(_rest(pool.generate("m", request("r2")), queued))
        for _ in range(100):
            if pool.queued("m"):
                break
            await asyncio.sleep(0.01)
        assert pool.queued("m") == 1
        await asyncio.wait_for(pool.unload("m"), 10)
        await _rest(first, seen)
        await asyncio.wait_for(waiting, ENDS_WITHIN_S)
        assert seen[-1] == Done("error") and queued[-1] == Done("error")
        assert [type(e) for e in queued] == [Error, Done]
    finally:
        await pool.shutdown()


async def test_esc_on_a_queued_request_ends_it_at_once_and_the_running_one_goes_on() -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", spec(max_concurrency=1))
        first = pool.generate("m", request("r1"))
        seen: list = []
        await _collect_until(first, 2, seen)
        queued: list = []
        waiting = asyncio.ensure_future(_rest(pool.generate("m", request("r2")), queued))
        while not pool.queued("m"):
            await asyncio.sleep(0.01)
        pool.cancel("r2")  # what Esc does for a reply that has not started
        await asyncio.wait_for(waiting, ENDS_WITHIN_S)
        assert queued == [Done("cancelled")]
        assert pool.queued("m") == 0
        await _collect_until(first, 4, seen)  # the running reply is untouched
        pool.cancel("r1")
        await _rest(first, seen)
        assert seen[-1] == Done("cancelled")
    finally:
        await pool.shutdown()


async def test_esc_after_the_model_went_away_is_harmless() -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", spec())
        events = pool.generate("m", request("r1"))
        seen: list = []
        await _collect_until(events, 2, seen)
        await pool.unload("m")
        pool.cancel("r1")  # the stream already ended: nothing is sent, nothing raises
        await _rest(events, seen)
        assert seen[-1] == Done("error")
    finally:
        await pool.shutdown()


async def test_unloading_a_model_that_is_still_loading_ends_the_waiting_request() -> None:
    pool = WorkerPool(load_timeout_s=60)
    try:
        loading = asyncio.ensure_future(pool.load("m", spec(hang_load_s=30)))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        await asyncio.wait_for(pool.unload("m"), 10)
        with pytest.raises(WorkerLoadError) as caught:
            await asyncio.wait_for(loading, ENDS_WITHIN_S)
        assert "unloaded" in caught.value.message
        assert time.monotonic() - started < ENDS_WITHIN_S
    finally:
        await pool.shutdown()
