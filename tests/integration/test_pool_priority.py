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


def _serial_spec(**extra: object) -> ModelSpec:
    """The scripted engine running one reply at a time, as llama.cpp does, that sets a
    running reply aside for a person's turn (core.engines.turn_order)."""
    return ModelSpec(path="scripted", engine="scripted", options=(
        ("reply", "word " * 20), ("tokens_per_s", 50), ("chunk_chars", 5),
        ("max_concurrency", 1), ("serial", True), *extra.items()))


async def _text(pool: WorkerPool, request: GenerationRequest, seen: dict[str, float]) -> str:
    """The reply's text; `seen[id]` is when its first token came (loop time)."""
    out = []
    async for event in pool.generate("m", request):
        if isinstance(event, TextDelta):
            seen.setdefault(request.request_id, asyncio.get_running_loop().time())
            out.append(event.text)
    seen[request.request_id + ":end"] = asyncio.get_running_loop().time()
    return "".join(out)


async def test_a_turn_started_during_api_streams_answers_before_they_end() -> None:
    """Every slot held by API replies (one runs, the others queue): the person's turn
    gets its first token while the running API reply is still going, and that reply,
    set aside and resumed, still comes out whole. Before, the turn waited for the
    running reply to end (one reply per worker, no preemption)."""
    pool = WorkerPool()
    seen: dict[str, float] = {}
    try:
        await pool.load("m", _serial_spec())
        api = [asyncio.ensure_future(_text(pool, _request(f"api-{i}"), seen)) for i in range(4)]
        while "api-0" not in seen:
            await asyncio.sleep(0.01)
        while pool.queued("m") < 3:
            await asyncio.sleep(0.01)
        person = await asyncio.wait_for(
            _text(pool, _request("person", interactive=True), seen), 30)
        texts = await asyncio.wait_for(asyncio.gather(*api), 60)
    finally:
        await pool.shutdown()
    assert person == "word " * 20
    assert seen["person"] < seen["api-0:end"], "the turn waited for the API reply to end"
    assert seen["person:end"] < seen["api-0:end"]
    assert texts == ["word " * 20] * 4  # every API reply whole: set aside, not cut


async def test_api_slots_stay_bounded_with_a_spare_for_people() -> None:
    """A spare slot is for interactive requests only: API requests never take it."""
    slots = PrioritySlots(1, spare=1)
    await slots.acquire()  # an API reply runs
    api = asyncio.ensure_future(slots.acquire(False))
    await asyncio.sleep(0)
    assert not api.done()
    await asyncio.wait_for(slots.acquire(True), 1)  # the person takes the spare at once
    person2 = asyncio.ensure_future(slots.acquire(True))
    await asyncio.sleep(0)
    assert not person2.done() and not api.done()
    slots.release()
    await asyncio.sleep(0)
    assert person2.done() and not api.done()  # one slot free: the person's, not the API's
    slots.release()
    slots.release()
    await asyncio.wait_for(api, 1)


async def test_other_replicas_hold_while_the_turn_prefills() -> None:
    """Two replicas, each running an API reply: while the person's turn is prefilled
    on one (0.5 s), the other holds its steps (core.workers.turn_hold), so the replicas
    share no CPU with the turn; it goes on after the turn's first token. Before, the
    other replica's reply ran on through the turn's prefill."""
    pool = WorkerPool()
    counts: dict[str, int] = {}
    marks: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    async def api(rid: str) -> None:
        async for event in pool.generate("m", _request(rid)):
            if isinstance(event, TextDelta):
                counts[rid] = counts.get(rid, 0) + 1
                marks.setdefault(rid, loop.time())

    try:
        await pool.load("m", _serial_spec(prefill_s=0.5), replicas=2)
        tasks = [asyncio.ensure_future(api(f"api-{i}")) for i in range(2)]
        while len(marks) < 2:
            await asyncio.sleep(0.01)
        before = dict(counts)
        during: dict[str, int] = {}
        async for event in pool.generate("m", _request("person", interactive=True)):
            if isinstance(event, TextDelta) and not during:  # its first token: count now
                during = {rid: counts[rid] - before[rid] for rid in before}
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        await pool.shutdown()
    assert sum(during.values()) <= 4, during  # ~25 tokens at 50/s if the other ran on
    assert all(counts[rid] == 20 for rid in counts)  # both API replies whole after


async def test_a_replica_is_kept_for_the_person_while_one_is_around() -> None:
    """Two one-at-a-time replicas and a person who just sent a turn: API requests go to
    the other replica, so the person's next turn never waits for an API reply's step."""
    pool = WorkerPool()
    try:
        await pool.load("m", _serial_spec(), replicas=2)
        seen: dict[str, float] = {}
        person = GenerationRequest("person", ({"role": "user", "content": "hi"},),
                                   SamplingParams(max_tokens=2), session_id="chat",
                                   interactive=True)
        await _text(pool, person, seen)
        kept = pool.worker_for_session("m", "chat")
        api = [GenerationRequest(f"api-{i}", ({"role": "user", "content": "hi"},),
                                 SamplingParams(max_tokens=2), session_id=f"s{i}")
               for i in range(4)]
        await asyncio.gather(*(_text(pool, r, seen) for r in api))
        places = {pool.worker_for_session("m", f"s{i}") for i in range(4)}
    finally:
        await pool.shutdown()
    assert kept is not None and kept not in places and len(places) == 1
