"""Replies over the socket: a client streams a turn through RemoteRuntime, two clients
call at once, and a reply goes on when the client that started it goes away (another
client watches it from its start and can stop it). The service is a real process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.events import Done, TextDelta, Usage
from core.service import RemoteRuntime, connect
from tests.helpers import service_proc as svc

REPLY = "Streamed over the socket, piece by piece."


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def _runtime(name: str) -> RemoteRuntime:
    rt = RemoteRuntime(await connect(name))
    await rt.start()
    return rt


async def test_a_turn_streams_to_a_remote_runtime(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply=REPLY))
    rt = await _runtime("tui")
    try:
        assert await rt.ensure_model()
        assert rt.model.state == "ready" and rt.model.label == "scripted"
        turn = await rt.start_turn(None, "hello")
        events = [e async for e in turn.events()]
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == REPLY
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop"
        assert any(isinstance(e, Usage) for e in events)
        stored = await rt.messages(turn.conversation_id)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[1].content == REPLY and stored[1].status == "complete"
        assert stored[1].id == turn.assistant_message_id
        assert [c.id for c in await rt.list_conversations()] == [turn.conversation_id]
        hits = await rt.search("socket")
        assert hits and hits[0].conversation_id == turn.conversation_id
    finally:
        await rt.close()


async def test_two_clients_calling_at_once(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply=REPLY, tokens_per_s=100))
    a, b = await _runtime("a"), await _runtime("b")
    try:
        async def chat(rt: RemoteRuntime, text: str) -> tuple[str, str]:
            turn = await rt.start_turn(None, text)
            got = [e.text async for e in turn.events() if isinstance(e, TextDelta)]
            return turn.conversation_id, "".join(got)

        async def browse(rt: RemoteRuntime) -> int:
            n = 0
            for _ in range(20):
                await rt.list_conversations()
                await rt.worker_status()
                n += 1
            return n

        results = await asyncio.gather(chat(a, "from a"), chat(b, "from b"), browse(a), browse(b))
        (cid_a, text_a), (cid_b, text_b) = results[0], results[1]
        assert text_a == REPLY and text_b == REPLY and cid_a != cid_b
        assert results[2:] == [20, 20]
        titles = {c.title for c in await b.list_conversations()}
        assert {"from a", "from b"} <= titles
    finally:
        await a.close()
        await b.close()


async def test_a_reply_outlives_its_client_and_another_watches_and_stops_it(
        llmdeck_home: Path) -> None:
    long_reply = "tick " * 400  # 400 pieces of 5 at 40 a second: ten seconds
    svc.start(*svc.scripted_args(reply=long_reply, tokens_per_s=40, chunk_chars=5))
    starter = await _runtime("gone")
    assert await starter.ensure_model()
    turn = await starter.start_turn(None, "keep going")
    first = [e async for e in _take(turn.events(), 3)]
    assert first
    await starter.close()  # the terminal went away mid-reply

    watcher = await _runtime("back")
    try:
        await asyncio.sleep(0.5)
        live = await watcher.watch_turn(turn.conversation_id)
        assert live is not None and live.turn_id == turn.turn_id
        seen: list[str] = []
        async for event in live.events():
            if isinstance(event, TextDelta):
                seen.append(event.text)
                if len("".join(seen)) > 300:
                    live.cancel()  # Esc in the other window
        text = "".join(seen)
        assert long_reply.startswith(text) and len(text) > 300, "replayed from the start"
        assert text != long_reply, "stopped before the end"
        stored = await watcher.messages(turn.conversation_id)
        assert stored[-1].status == "stopped" and stored[-1].content == text
        assert await watcher.live_turns() and (await watcher.live_turns())[0]["done"]
    finally:
        await watcher.close()


async def test_settings_edited_in_one_client_reach_the_service_and_the_file(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(), "--no-preload")
    a, b = await _runtime("a"), await _runtime("b")
    try:
        assert a.settings.system_prompt == ""
        a.settings.system_prompt = "Answer in one line."
        a.settings.sampling.temperature = 0.25
        assert await a.save_settings() is None
        fresh = await b.call("get_settings")
        assert fresh.system_prompt == "Answer in one line." and fresh.sampling.temperature == 0.25
        assert 'system_prompt = "Answer in one line."' in \
            (llmdeck_home / "config" / "config.toml").read_text()
    finally:
        await a.close()
        await b.close()


async def _take(events, n: int):  # noqa: ANN001, ANN202
    count = 0
    async for event in events:
        yield event
        count += 1
        if count >= n:
            return


async def test_a_tool_call_is_approved_over_the_socket_by_any_watching_client(
        llmdeck_home: Path) -> None:
    from core.tools import ToolStatus
    from tests.fixtures.tools import HERMES_TEMPLATE, hermes_call

    replies = [hermes_call("now", {}), "Checked the clock.",
               hermes_call("now", {}), "No clock then."]
    svc.start(*svc.scripted_args(replies=replies, template=HERMES_TEMPLATE, chunk_chars=7))
    a, b = await _runtime("a"), await _runtime("b")
    try:
        asked: list[str] = []

        async def allow(call):  # noqa: ANN001, ANN202
            asked.append(call.name)
            return "allow"

        turn = await a.start_turn(None, "what time is it?")
        turn.approve = allow
        events = [e async for e in turn.events()]
        states = [e.state for e in events if isinstance(e, ToolStatus)]
        assert asked == ["now"] and states[-1] == "done", states
        assert "".join(e.text for e in events if isinstance(e, TextDelta)).endswith(
            "Checked the clock.")

        # The starter does not answer; another client watching the reply does.
        second = await a.start_turn(turn.conversation_id, "and now?")
        watcher = await b.watch_turn(turn.conversation_id)
        assert watcher is not None and watcher.turn_id == second.turn_id

        async def deny(call):  # noqa: ANN001, ANN202
            return "deny"

        watcher.approve = deny
        seen_b, seen_a = await asyncio.gather(
            _collect(watcher.events()), _collect(second.events()))
        for seen in (seen_a, seen_b):
            states = [e.state for e in seen if isinstance(e, ToolStatus)]
            assert states[-1] == "denied", states
            assert isinstance(seen[-1], Done)
        stored = await a.messages(turn.conversation_id)
        assert [m.role for m in stored].count("tool") == 2
    finally:
        await a.close()
        await b.close()


async def _collect(events):  # noqa: ANN001, ANN202
    return [e async for e in events]


async def test_a_crashed_service_is_told_in_a_sentence_and_a_new_one_attached(
        llmdeck_home: Path) -> None:
    import os
    import signal

    (llmdeck_home / "config").mkdir(exist_ok=True)
    (llmdeck_home / "config" / "config.toml").write_text(
        'model = "scripted"\nengine = "scripted"\n')  # what a service started bare loads
    long_reply = "tock " * 400
    pid = svc.start(*svc.scripted_args(reply=long_reply, tokens_per_s=40, chunk_chars=5))
    rt = await _runtime("tui")
    lost: list[str] = []
    rt.lost_listeners.append(lost.append)
    turn = await rt.start_turn(None, "until the crash")
    events = []
    async for event in turn.events():
        events.append(event)
        if len(events) == 20:
            os.kill(pid, signal.SIGKILL)
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "error"
    assert "service" in events[-2].message and "crash" in events[-2].message
    assert lost and "crash" in lost[0]
    await rt.reconnect(timeout=60)
    try:
        assert rt.client.pid != pid and rt.model is not None
        stored = await rt.messages(turn.conversation_id)
        cut = stored[-1]
        assert cut.role == "assistant" and cut.content and long_reply.startswith(cut.content)
        assert cut.status == "stopped", "the new service marks the cut reply as ended"
        assert "stopped unexpectedly" in (cut.error or "")
        fresh = await rt.start_turn(turn.conversation_id, "again")
        assert [e async for e in fresh.events()][-1] == Done("stop")
    finally:
        await rt.close()


async def test_status_and_model_pushes_reach_a_subscribed_client(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(), "--no-preload")
    rt = await _runtime("f4")
    pushes: list[dict] = []
    rt.client.listeners.append(lambda m: pushes.append(m) if m.get("event") == "status" else None)
    states: list[str] = []
    rt.listeners.append(lambda model: states.append(model.state))
    try:
        first = await rt.call("subscribe", topic="status")
        assert first["clients"] == 1 and first["pid"] == rt.client.pid
        assert await rt.ensure_model()
        await asyncio.sleep(2.5)
        assert pushes and pushes[-1]["data"]["models"] == ["scripted"]
        assert states[-2:] == ["loading", "ready"], states
    finally:
        await rt.close()
