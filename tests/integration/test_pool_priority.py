"""The person's turn first (issue 45 item 3): with a worker's one slot busy and API
requests queued for it, a turn from the app (interactive) takes the slot next; API
requests still get their bounded share while a person waits.

Real worker process (the scripted engine, one request at a time, as llama.cpp runs).
It was first come, first served (an asyncio.Semaphore): the person waited behind every
API request queued before them.
"""

from __future__ import annotations

import asyncio

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import TextDelta
from core.workers.pool import WorkerPool
from core.workers.slots import API_EVERY, PrioritySlots

pytestmark = pytest.mark.timeout(90)


def _request(rid: str, interactive: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "hi"},),
                             SamplingParams(max_tokens=50), interactive=interactive)


async def test_the_apps_turn_goes_before_queued_api_requests() -> None:
    spec = ModelSpec(path="scripted", engine="scripted", options=(
        ("reply", "word " * 10), ("tokens_per_s", 100), ("chunk_chars", 5),
        ("max_concurrency", 1)))
    pool = WorkerPool()
    started: list[str] = []

    async def run(request: GenerationRequest) -> None:
        async for event in pool.generate("m", request):
            if isinstance(event, TextDelta) and request.request_id not in started:
                started.append(request.request_id)

    try:
        await pool.load("m", spec)
        tasks = [asyncio.ensure_future(run(_request("api-0")))]
        while not started:
            await asyncio.sleep(0.01)
        tasks += [asyncio.ensure_future(run(_request(f"api-{i}"))) for i in range(1, 5)]
        while pool.queued("m") < 4:
            await asyncio.sleep(0.01)
        tasks.append(asyncio.ensure_future(run(_request("person", interactive=True))))
        while pool.queued("m") < 5:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        await pool.shutdown()
    assert started[:2] == ["api-0", "person"], started  # only the one running was ahead


async def test_api_requests_keep_a_bounded_share_while_people_wait() -> None:
    slots = PrioritySlots(1)
    await slots.acquire()
    order: list[str] = []

    async def take(name: str, interactive: bool) -> None:
        await slots.acquire(interactive)
        order.append(name)
        slots.release()

    waiters = [asyncio.ensure_future(take(f"api-{i}", False)) for i in range(3)]
    waiters += [asyncio.ensure_future(take(f"person-{i}", True)) for i in range(6)]
    await asyncio.sleep(0)
    assert slots.waiting() == (6, 3)
    slots.release()
    await asyncio.gather(*waiters)
    assert order[:API_EVERY + 1] == [*(f"person-{i}" for i in range(API_EVERY)), "api-0"]
    assert order.index("api-1") < len(order) - 1  # not starved to the end


async def test_a_waiter_cancelled_leaves_no_slot_taken() -> None:
    slots = PrioritySlots(1)
    await slots.acquire()
    gone = asyncio.ensure_future(slots.acquire(True))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    slots.release()
    await asyncio.wait_for(slots.acquire(), 1)  # the slot is free, not lost to the cancel
