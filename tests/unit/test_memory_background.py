"""The end of the context (issue 46, item 3): the summary is written ahead, in the
background, and the turn at the threshold only swaps it in; room is kept for the reply."""

from __future__ import annotations

import asyncio

from core.memory.ahead import SummariesAhead
from core.memory.rollover import ConversationMemory, PreparedSummary
from core.memory.summarise import SUMMARY_PREFIX, fallback_summary
from core.memory.window import ContextMonitor, reply_room

PADDING = "word " * 40  # about 40 tokens a message


def _no_inline_summary(messages: list[dict]) -> str:
    raise AssertionError("a turn waited for a summary written inline")


def _memory(context: int, room: int = 0) -> ConversationMemory:
    monitor = ContextMonitor(context, reply_room=room)
    return ConversationMemory("c", monitor, _no_inline_summary, background=True)


def _chat(memory: ConversationMemory, turns: int) -> list:
    plans = []
    for i in range(turns):
        plans.append(memory.prepare(f"question {i}: {PADDING}"))
        memory.record_reply(f"answer {i}: {PADDING}")
    return plans


def test_the_reply_room_is_a_quarter_of_the_context_within_max_tokens() -> None:
    assert reply_room(4096) == 1024
    assert reply_room(4096, max_tokens=300) == 300
    assert reply_room(512) == 256  # never less than 256 (unless max_tokens asks less)


def test_past_the_threshold_without_a_summary_the_turn_goes_on_whole() -> None:
    memory = _memory(1000)
    plans = _chat(memory, 9)  # about 90 tokens a turn: past 70% by the 8th
    assert plans[-1].projected_use >= 0.7
    assert all(p.marker is None and not p.waited for p in plans)


def test_a_prepared_summary_is_swapped_in_at_the_threshold() -> None:
    memory = _memory(1000)
    _chat(memory, 7)
    covered = len(memory.session) - 2  # the newest exchange was not summarised yet
    memory.ready = PreparedSummary(memory.session_id, covered, "They talked about words.")
    plan = memory.prepare(f"question 7: {PADDING}")
    assert plan.marker is not None and not plan.waited
    assert plan.marker.summary == "They talked about words."
    assert plan.messages[0]["content"] == f"{SUMMARY_PREFIX}\nThey talked about words."
    # The messages after what the summary covers go on verbatim.
    assert [m["content"][:10] for m in plan.messages[1:]] == [
        "question 6", "answer 6: ", "question 7"]
    assert len(memory.history) == 15  # the history stays whole


def test_a_summary_for_another_session_is_not_used() -> None:
    memory = _memory(1000)
    _chat(memory, 8)
    memory.ready = PreparedSummary("c:other", 4, "stale")
    assert memory.prepare(f"question 8: {PADDING}").marker is None


def test_no_room_left_for_the_reply_rolls_at_once_without_a_model() -> None:
    memory = _memory(1000, room=500)
    plans = _chat(memory, 6)  # ~45% full plus 500 for the reply: past the context
    rolled = [p for p in plans if p.marker is not None]
    assert rolled and not any(p.waited for p in plans)
    assert "The user asked:" in rolled[0].marker.summary  # the fallback, written at once
    for plan in plans:  # every prompt leaves the room for the reply
        assert memory.monitor.used(plan.messages) + 500 <= 1000


def test_a_fallback_summary_never_nests_its_prefix() -> None:
    earlier = {"role": "system", "content": f"{SUMMARY_PREFIX}\nThey met."}
    text = fallback_summary([earlier, {"role": "user", "content": "and then?"}], 100)
    assert SUMMARY_PREFIX not in text and text.startswith("They met.")


async def test_a_summary_being_written_yields_to_a_turn_on_a_serial_engine() -> None:
    loop = asyncio.get_running_loop()
    ahead = SummariesAhead()
    writing, written = loop.create_future(), loop.create_future()
    written.set_result("They talked.")
    ahead.start("s", 3, writing)
    ahead.start("t", 2, written)
    ahead.yield_to_turn("s")  # still being written: stopped, started again later
    ahead.yield_to_turn("t")  # done: kept for the swap
    assert writing.cancelled() and "s" not in ahead
    assert ahead.ready("t") == PreparedSummary("t", 2, "They talked.")
    ahead.close()
