"""A reply started by one client is pushed to the others ("turn_started", topic "turns"),
so a second terminal on that conversation follows it at once instead of finding it by a
poll; its starter is not told (it has the reply already)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from core.service import RemoteRuntime, connect
from tests.helpers import service_proc as svc
from tui.service_runtime import ServiceRuntime


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def test_a_started_reply_is_pushed_to_the_other_clients_not_its_starter(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply="tock " * 200, tokens_per_s=50, chunk_chars=5))
    raw = svc.raw_client()
    raw.sendall(b'{"id": 1, "call": "subscribe", "args": {"topic": "turns"}}\n')
    assert json.loads(svc.read_line(raw)) == {"id": 1, "result": []}
    watcher, starter = ServiceRuntime(client_name="watcher"), ServiceRuntime(client_name="starter")
    await watcher.start()
    await starter.start()
    heard: dict[str, list[tuple[float, dict]]] = {"watcher": [], "starter": []}
    watcher.live_listeners.append(lambda s: heard["watcher"].append((time.monotonic(), s)))
    starter.live_listeners.append(lambda s: heard["starter"].append((time.monotonic(), s)))
    try:
        turn = await starter.start_turn(None, "count")
        async with asyncio.timeout(10):
            while not heard["watcher"]:
                await asyncio.sleep(0.01)
        _, summary = heard["watcher"][0]
        assert summary["turn"] == turn.turn_id
        assert summary["conversation_id"] == turn.conversation_id and not summary["done"]
        pushed = json.loads(svc.read_line(raw))
        assert pushed["event"] == "turn_started" and pushed["data"]["turn"] == turn.turn_id
        turn.cancel()
        assert [e async for e in turn.events()]
        assert heard["starter"] == []
    finally:
        raw.close()
        await watcher.close()
        await starter.close()


async def test_a_remote_runtime_subscribes_to_turns_as_it_starts(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply="hi"))
    one, two = RemoteRuntime(await connect("one")), RemoteRuntime(await connect("two"))
    await one.start()
    await two.start()
    seen: list[dict] = []
    one.turn_listeners.append(seen.append)
    try:
        turn = await two.start_turn(None, "hello")
        assert [e async for e in turn.events()]
        assert [s["turn"] for s in seen] == [turn.turn_id]
    finally:
        await one.close()
        await two.close()
