"""Esc over the socket stops a reply every time, whenever it comes: right after start_turn
returns (the reply not yet generating) and right after its first piece. Each moment is
tried ten times in a row against a real service process with the scripted engine; a
cancel that is lost shows as a reply that runs to its end ("stop", stored complete)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.events import Done, TextDelta
from core.service import RemoteRuntime, connect
from tests.helpers import service_proc as svc

LONG = "tick " * 200  # 200 pieces at 100 a second: two seconds when nothing stops it
TRIES = 10


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def _stopped(rt: RemoteRuntime, turn, text: str) -> None:  # noqa: ANN001
    stored = await rt.messages(turn.conversation_id)
    assert stored[-1].role == "assistant" and stored[-1].status == "stopped", stored[-1].status
    assert stored[-1].content == text and LONG.startswith(text) and text != LONG


async def test_a_cancel_right_after_start_turn_stops_the_reply_every_time(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply=LONG, tokens_per_s=100, chunk_chars=5))
    rt = RemoteRuntime(await connect("tui"))
    await rt.start()
    try:
        assert await rt.ensure_model()
        for n in range(TRIES):
            turn = await rt.start_turn(None, f"try {n}")
            turn.cancel()  # Esc the moment the reply exists
            events = [e async for e in turn.events()]
            assert isinstance(events[-1], Done), events[-1]
            assert events[-1].finish_reason == "cancelled", f"try {n}: {events[-1]}"
            await _stopped(rt, turn, "".join(e.text for e in events if isinstance(e, TextDelta)))
    finally:
        await rt.close()


async def test_a_cancel_after_the_first_piece_stops_the_reply_every_time(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply=LONG, tokens_per_s=100, chunk_chars=5))
    rt = RemoteRuntime(await connect("tui"))
    await rt.start()
    try:
        assert await rt.ensure_model()
        for n in range(TRIES):
            turn = await rt.start_turn(None, f"try {n}")
            text, last = "", None
            async for event in turn.events():
                if isinstance(event, TextDelta):
                    if not text:
                        turn.cancel()  # Esc as the first piece shows
                    text += event.text
                last = event
            assert isinstance(last, Done) and last.finish_reason == "cancelled", f"try {n}: {last}"
            await _stopped(rt, turn, text)
    finally:
        await rt.close()
