"""A reply runs as the Runtime's own task: it outlives its watcher, any number of watchers
see it (the past compacted, then live), a stalled one never holds it up, and any of them
can stop it. In process, on the scripted engine in a real worker process."""

from __future__ import annotations

import asyncio
import time

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, ReasoningDelta, TextDelta, Usage
from core.runtime import Runtime

THINKING = "Weighing the options one by one before answering. " * 3
ANSWER = " ".join(f"word{i:03d}" for i in range(120))  # 960 characters: 240 pieces of 4
REPLY = f"<think>{THINKING}</think>{ANSWER}"
RATE = 200  # pieces per second: the whole reply takes ~1.5 s
ENDS_WITHIN_S = 30.0


def _runtime(**options: object) -> Runtime:
    opts = {"reply": REPLY, "tokens_per_s": RATE, "label": "scripted-live", **options}
    spec = ModelSpec(path="scripted", engine="scripted", context_size=8192,
                     options=tuple(opts.items()))
    return Runtime(Settings(), model_spec=spec)


def _text(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _reasoning(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, ReasoningDelta))


async def _until_text(events, seen: list, chars: int) -> None:
    """Read events into `seen` until at least `chars` characters of answer arrived."""
    async for event in events:
        seen.append(event)
        if len(_text(seen)) >= chars:
            return


async def _drain(events, seen: list | None = None) -> list:
    seen = [] if seen is None else seen

    async def _all() -> None:
        async for event in events:
            seen.append(event)

    await asyncio.wait_for(_all(), ENDS_WITHIN_S)
    return seen


async def _stored_reply(rt: Runtime, cid: str, status: str) -> list:
    """The conversation's messages once its reply is stored with `status` (or a failure)."""
    deadline = time.monotonic() + ENDS_WITHIN_S
    while True:
        messages = await rt.messages(cid)
        if messages and messages[-1].role == "assistant" and messages[-1].status == status:
            return messages
        assert time.monotonic() < deadline, f"the reply was not stored as {status}: {messages}"
        await asyncio.sleep(0.05)


async def test_a_watcher_that_leaves_mid_reply_does_not_stop_it() -> None:
    rt = _runtime()
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a long story")
        seen: list = []
        await _until_text(turn.events(), seen, 40)  # then the view goes away
        assert len(_text(seen)) < len(ANSWER)
        [live] = rt.live_turns()
        assert (live.conversation_id, live.turn_id, live.model) == (
            turn.conversation_id, turn.turn_id, "scripted-live")
        messages = await _stored_reply(rt, turn.conversation_id, "complete")
        assert [m.role for m in messages] == ["user", "assistant"]  # stored once
        assert messages[-1].content == ANSWER  # whole, in order
        assert messages[-1].reasoning == THINKING
        assert rt.live_turns() == [] and rt.watch_turn(turn.conversation_id) is None
    finally:
        await rt.close()


async def test_a_late_watcher_gets_the_past_compacted_then_live() -> None:
    rt = _runtime()
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a long story")
        first_view = turn.events()
        seen: list = []
        await _until_text(first_view, seen, 200)
        late = rt.watch_turn(turn.conversation_id)
        assert late is not None
        past = [await late.__anext__(), await late.__anext__()]
        # everything so far in two events: the thinking, then the answer so far
        assert past[0] == ReasoningDelta(THINKING)
        assert isinstance(past[1], TextDelta) and len(past[1].text) >= len(_text(seen))
        assert ANSWER.startswith(past[1].text) and len(past[1].text) < len(ANSWER)
        rest = await _drain(late)
        assert len(rest) > 3  # live pieces follow, not one block at the end
        assert past[1].text + _text(rest) == ANSWER
        assert isinstance(rest[-2], Usage) and rest[-1] == Done("stop")
        mine = await _drain(first_view, seen)
        assert _text(mine) == ANSWER and mine[-1] == Done("stop")
    finally:
        await rt.close()


async def test_a_stalled_watcher_does_not_slow_the_turn_and_catches_up_compacted() -> None:
    rt = _runtime()
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a long story")
        stalled = turn.events()
        first = await stalled.__anext__()  # then it reads nothing for the whole reply
        assert first == ReasoningDelta(THINKING[: len(first.text)])
        started = time.monotonic()
        messages = await _stored_reply(rt, turn.conversation_id, "complete")
        took = time.monotonic() - started
        assert messages[-1].content == ANSWER
        assert rt.live_turns() == []
        # what it missed comes back merged: the rest of the thinking, the answer, the end
        rest = await _drain(stalled)
        assert [type(e) for e in rest] == [ReasoningDelta, TextDelta, Usage, Done]
        assert first.text + _reasoning(rest) == THINKING and _text(rest) == ANSWER
        # 240 pieces at RATE/s: the stalled view held nothing up (generous bound, busy box)
        assert took < 10 * len(REPLY) / 4 / RATE
    finally:
        await rt.close()


async def test_cancel_from_a_second_watcher_stops_it_for_everyone_with_the_text_kept() -> None:
    rt = _runtime()
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a long story")
        starter: list = []
        await _until_text(turn.events(), starter, 20)
        reading = asyncio.ensure_future(_drain(turn.events()))  # the first view, from the top
        second = rt.watch_turn(turn.conversation_id)
        assert second is not None
        await second.__anext__()
        second.cancel()  # Esc in the other view
        theirs, mine = await asyncio.gather(reading, _drain(second))
        assert theirs[-1] == Done("cancelled") and mine[-1] == Done("cancelled")
        messages = await _stored_reply(rt, turn.conversation_id, "stopped")
        kept = messages[-1].content
        assert 0 < len(kept) < len(ANSWER) and ANSWER.startswith(kept)
        assert _text(theirs) == kept
        assert rt.cancel_turn(turn.conversation_id) is False  # nothing runs there now
    finally:
        await rt.close()


async def test_cancel_turn_by_conversation_and_close_stop_unwatched_replies() -> None:
    rt = _runtime()
    await rt.start()
    closed = False
    try:
        a = await rt.start_turn(None, "first story")
        b = await rt.start_turn(None, "second story")
        for turn in (a, b):
            await _until_text(turn.events(), [], 8)  # started; nobody watches from here
        assert {t.conversation_id for t in rt.live_turns()} == {a.conversation_id, b.conversation_id}
        assert rt.cancel_turn(a.conversation_id) is True
        stopped = await _stored_reply(rt, a.conversation_id, "stopped")
        assert 0 < len(stopped[-1].content) < len(ANSWER)
        await rt.close()  # the service closing: the running reply is stored as stopped
        closed = True
        rt2 = Runtime(Settings(), model_spec=_runtime().models.spec_override)
        await rt2.start(preload=False)
        try:
            kept = await rt2.messages(b.conversation_id)
            assert kept[-1].status == "stopped" and ANSWER.startswith(kept[-1].content)
        finally:
            await rt2.close()
    finally:
        if not closed:
            await rt.close()
