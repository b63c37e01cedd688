"""Long conversations through the real Runtime: worker process, pool, SQLite, memory.

The scripted engine answers from its `replies`, one per generate call. Summaries are
written in the background (from 60% full) as generate calls of their own, so a summary
the model wrote is one of those replies; a rollover that could not wait for it (no room
left for the reply) carries the fallback summary, the user's own questions.
"""

from __future__ import annotations

import asyncio

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, TextDelta, Usage
from core.memory import is_marker, load_markers
from core.memory.rollover import SUMMARY_PREFIX
from core.runtime import Runtime

CONTEXT = 400
REPLIES = tuple(
    f"Reply {i}: noted, item {i} sits on shelf {i} of the archive. "
    "The catalogue lists it with the others in the east wing."
    for i in range(60)
)


def _runtime(*options: tuple[str, object]) -> Runtime:
    spec = ModelSpec(path="scripted", engine="scripted", context_size=CONTEXT,
                     options=(("replies", REPLIES), ("fixed_timing", True), *options))
    settings = Settings(context_size=CONTEXT)
    settings.sampling.max_tokens = 200
    return Runtime(settings, model_spec=spec)


def _question(i: int) -> str:
    if i == 0:
        return "Remember this: my code word is HERON-42. Please keep it in mind."
    return f"Question {i}: where is item {i} kept, and who catalogued it in the archive?"


async def _chat(rt: Runtime, cid: str | None, turns: int, start: int = 0, *,
                reader: bool = False):
    """Run `turns` turns; returns (cid, [(turn, reply text, usage)]). A `reader` takes
    the time to read each reply: the summary being written meanwhile is done by the next."""
    out = []
    for i in range(start, start + turns):
        if reader:
            await asyncio.gather(*rt.chat.ahead.pending(), return_exceptions=True)
        turn = await rt.start_turn(cid, _question(i))
        cid = turn.conversation_id
        events = [e async for e in turn.events()]
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop", events[-1]
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        usage = next(e for e in events if isinstance(e, Usage))
        out.append((turn, text, usage))
    return cid, out


async def test_long_conversation_rolls_over_twice_and_keeps_answering() -> None:
    rt = _runtime()
    await rt.start()
    try:
        cid, turns = await _chat(rt, None, 16)
        rollovers = [t for t, _, _ in turns if t.rollover is not None]
        assert len(rollovers) >= 2, [u.prompt_tokens for _, _, u in turns]

        # Every turn got an answer, none waited for a summary, and a summary is the
        # model's (a reply of its own, through the pool) or, where there was no time to
        # write it, the fallback.
        for turn, text, usage in turns:
            assert text in REPLIES and not turn.waited_for_summary
            if turn.rollover is not None:
                summary = turn.rollover.summary
                assert summary in REPLIES or "The user asked:" in summary, summary
            # The real prompt never overflows the context (it would without rollovers).
            assert usage.prompt_tokens < CONTEXT

        # Rehydration: each rollover starts a fresh session seeded with its summary.
        sessions = [t.request.session_id for t, _, _ in turns]
        assert sessions[0] == cid
        for turn in rollovers:
            marker = turn.rollover
            assert turn.request.session_id == marker.new_session_id != marker.old_session_id
            seed = turn.request.messages
            assert seed[0]["content"] == f"{SUMMARY_PREFIX}\n{marker.summary}"
            assert seed[-1] == {"role": "user", "content": _question(turns.index(
                next(x for x in turns if x[0] is turn)))}  # the new question closes it
            assert len(seed) < len(turns)  # earlier turns were replaced by the summary
        assert len(set(sessions)) == len(rollovers) + 1
        assert [m.seq for m in (t.rollover for t in rollovers)] == list(
            range(1, len(rollovers) + 1)
        )

        # Stored: the full history stays, markers sit in the stream, search finds them.
        stored = await rt.messages(cid, limit=1000)
        assert sum(1 for m in stored if m.role == "user") == 16
        assert sum(1 for m in stored if is_marker(m)) == len(rollovers)
        assert stored[0].content == _question(0)  # nothing was rewritten
        markers = await rt.store_call(load_markers, rt.store_handle, cid)
        assert markers == [t.rollover for t in rollovers]
        first = next(i for i, m in enumerate(stored) if is_marker(m))
        assert stored[first + 1].role == "user"  # the marker precedes the turn it started
        assert stored[first].content.startswith("Memory: conversation summarised at ")
        assert "earlier messages remain searchable" in stored[first].content
        hits = await rt.search("HERON")
        assert [h.conversation_id for h in hits] == [cid]
    finally:
        await rt.close()


async def test_a_summary_written_in_the_background_is_swapped_in() -> None:
    """A user who reads each reply gives the background summary its time: every rollover
    then carries the model's summary, and no turn waited for one."""
    rt = _runtime()
    await rt.start()
    try:
        _, turns = await _chat(rt, None, 12, reader=True)
        rollovers = [t.rollover for t, _, _ in turns if t.rollover is not None]
        assert rollovers
        assert all(m.summary in REPLIES for m in rollovers), [m.summary for m in rollovers]
        assert not any(t.waited_for_summary for t, _, _ in turns)
    finally:
        await rt.close()


async def test_on_a_one_at_a_time_engine_the_summary_yields_and_the_swap_is_warmed() -> None:
    """llama.cpp runs one request at a time: a summary still being written stops when a
    turn comes (and starts again after it); one written in the reader's time is swapped
    in, and the session it starts is prefilled once the next turn is sure to swap."""
    rt = _runtime(("max_concurrency", 1), ("tokens_per_s", 200))
    await rt.start()
    try:
        _, hasty = await _chat(rt, None, 12)  # no time between turns: summaries yield
        assert not any(t.waited_for_summary for t, _, _ in hasty)
        assert all(t.rollover.summary not in REPLIES for t, _, _ in hasty if t.rollover)
        _, turns = await _chat(rt, None, 12, reader=True)
        rolled = [t for t, _, _ in turns if t.rollover is not None]
        assert rolled and all(t.rollover.summary in REPLIES for t in rolled)
        assert {t.rollover.old_session_id for t in rolled} <= rt.chat.room.warmed
    finally:
        await rt.close()


async def test_a_restarted_app_resumes_the_rolled_over_session() -> None:
    rt = _runtime()
    await rt.start()
    try:
        cid, turns = await _chat(rt, None, 10)
        last_marker = [t.rollover for t, _, _ in turns if t.rollover][-1]
        live_session = turns[-1][0].request.session_id
        live_messages = turns[-1][0].request.messages
    finally:
        await rt.close()
    assert live_session == last_marker.new_session_id

    rt2 = _runtime()
    await rt2.start()
    try:
        turn = await rt2.start_turn(cid, _question(10))
        [e async for e in turn.events()]
        if turn.rollover is None:  # same session, same seed, plus the turns since
            assert turn.request.session_id == live_session
            n = len(live_messages) - 1
            assert turn.request.messages[:n] == live_messages[:n]
        else:
            assert turn.rollover.seq == last_marker.seq + 1
    finally:
        await rt2.close()


async def test_regenerate_after_a_rollover_uses_the_rolled_session() -> None:
    rt = _runtime()
    await rt.start()
    try:
        cid, turns = await _chat(rt, None, 8)
        marker = [t.rollover for t, _, _ in turns if t.rollover][-1]
        last = turns[-1][0]
        again = await rt.regenerate(cid, last.assistant_message_id)
        assert again.user_message_id == last.user_message_id
        assert again.request.session_id == marker.new_session_id != cid
        assert again.request.messages == last.request.messages  # the same seeded session
        text = "".join([e.text async for e in again.events() if isinstance(e, TextDelta)])
        assert text  # it answers again
        branches = await rt.branch_positions([again.assistant_message_id])
        assert branches[again.assistant_message_id] == (2, 2)
    finally:
        await rt.close()
