"""A long conversation in a small context rolls over (summary + facts + last turns),
keeps answering and keeps what it knew; the full history is never rewritten."""

from __future__ import annotations

import asyncio
import json
import re

from core.memory.rollover import SUMMARY_PREFIX, ConversationMemory, RolloverMarker
from core.memory.window import ContextMonitor

CONTEXT = 400


def scripted_summarise(messages: list[dict]) -> str:
    """Stands in for the loaded model: lists every topic it can see, summaries included."""
    topics = sorted(
        {t for m in messages for t in re.findall(r"topic-\d+", m["content"])},
        key=lambda t: int(t.split("-")[1]),
    )
    return "Topics discussed so far: " + ", ".join(topics) + "."


def scripted_model(messages: tuple[dict, ...]) -> str:
    """Stands in for the chat model: answers from what is in its context window only."""
    question = messages[-1]["content"]
    if "which topics" in question:
        seen = sorted(
            {t for m in messages for t in re.findall(r"topic-\d+", m["content"])},
            key=lambda t: int(t.split("-")[1]),
        )
        return "We covered " + ", ".join(seen) + "."
    topic = re.search(r"topic-\d+", question).group(0)
    return f"Here is a fairly detailed answer about {topic} " + "with some padding words " * 6


def _question(i: int) -> str:
    return f"Please tell me about topic-{i} and how it relates to the earlier ones in detail."


def test_long_conversation_rolls_over_twice_and_remembers() -> None:
    monitor = ContextMonitor(context_tokens=CONTEXT)
    facts_asked: list[str] = []

    def retrieve(question: str) -> list[str]:
        facts_asked.append(question)
        return ["The project deadline is 14 March [plan.pdf p.2]."]

    memory = ConversationMemory(
        "conv-1", monitor, scripted_summarise, retrieve=retrieve, system_prompt="Be brief."
    )
    sent: list[tuple[dict, ...]] = []
    markers = []
    sessions = set()
    for i in range(1, 19):
        plan = memory.prepare(_question(i))
        sent.append(plan.messages)
        sessions.add(plan.session_id)
        assert plan.projected_use < 1.0, f"turn {i} would overflow the context"
        if plan.marker:
            markers.append(plan.marker)
        memory.record_reply(scripted_model(plan.messages))

    assert len(markers) >= 2
    assert [m.seq for m in markers] == list(range(1, len(markers) + 1))
    assert len(sessions) == len(markers) + 1  # each rollover starts a fresh session

    first, second = markers[0], markers[1]
    # The summary is visible to the model right after the rollover, with the facts.
    turn_after = sent[first.at_message // 2]
    assert turn_after[0] == {"role": "system", "content": "Be brief."}
    assert any(
        m["content"].startswith(SUMMARY_PREFIX) and first.summary in m["content"]
        for m in turn_after
    )
    assert any("14 March [plan.pdf p.2]" in m["content"] for m in turn_after)
    assert first.facts == ("The project deadline is 14 March [plan.pdf p.2].",)
    assert first.tokens_after < first.tokens_before
    carried = [m for m in first.seed if m["role"] != "system"]
    assert first.kept_messages == len(carried) > 0
    assert carried[0]["role"] == "user" and carried == list(turn_after[-1 - len(carried) : -1])
    # The second summary still knows what only the first summary carried.
    assert "topic-1," in second.summary
    assert second.old_session_id == first.new_session_id

    # It keeps answering, and what it knew before both rollovers is still in reach.
    plan = memory.prepare("Remind me: which topics did we discuss?")
    answer = scripted_model(plan.messages)
    memory.record_reply(answer)
    assert "topic-1," in answer and "topic-18" in answer

    # The full history is every message, untouched, in order.
    assert len(memory.history) == 2 * 19
    assert memory.history[0] == {"role": "user", "content": _question(1)}
    assert all(m["content"] != "" for m in memory.history)
    assert not any(SUMMARY_PREFIX in m["content"] for m in memory.history)

    # Markers are plain records the store can keep.
    record = json.loads(json.dumps(first.to_dict()))
    assert record["kind"] == "rollover" and record["summary"] == first.summary
    assert RolloverMarker.from_dict(record) == first


def test_context_is_sent_but_not_kept_in_the_session() -> None:
    memory = ConversationMemory("c", ContextMonitor(context_tokens=4000), scripted_summarise)
    plan = memory.prepare("What is the deadline?", context="[plan.pdf p.2]\nThe deadline is May.")
    assert plan.messages[-1]["content"].startswith("[plan.pdf p.2]")
    assert memory.session[-1]["content"] == "What is the deadline?"
    assert memory.history[-1]["content"] == "What is the deadline?"


def test_async_summarise_from_the_engine() -> None:
    calls = []

    async def engine_summarise(messages: list[dict]) -> str:
        calls.append(len(messages))
        await asyncio.sleep(0)
        return "Earlier: topic-1 and topic-2."

    async def run() -> list:
        memory = ConversationMemory("c", ContextMonitor(context_tokens=150), engine_summarise)
        markers = []
        for i in range(1, 8):
            plan = await memory.aprepare(_question(i))
            markers += [plan.marker] if plan.marker else []
            memory.record_reply(scripted_model(plan.messages))
        return markers

    markers = asyncio.run(run())
    assert markers and calls
    assert markers[0].summary == "Earlier: topic-1 and topic-2."


def test_no_rollover_without_turns_even_if_first_prompt_is_big() -> None:
    memory = ConversationMemory("c", ContextMonitor(context_tokens=20), scripted_summarise)
    plan = memory.prepare(_question(1))
    assert plan.marker is None and plan.projected_use > 0.7


def test_real_usage_calibrates_the_projection() -> None:
    monitor = ContextMonitor(context_tokens=10_000)
    memory = ConversationMemory("c", monitor, scripted_summarise)
    plan = memory.prepare(_question(1))
    memory.record_reply("ok", prompt_tokens=3 * monitor.used(plan.messages))
    assert monitor.scale("c") == 3.0


def test_markers_are_stored_in_the_real_store_and_searchable(tmp_path) -> None:
    from core.memory.persist import is_marker, load_markers, save_marker
    from core.store import Store

    store = Store.open(tmp_path / "memory.db")
    try:
        conv = store.create_conversation("long chat")
        memory = ConversationMemory(conv, ContextMonitor(context_tokens=200), scripted_summarise)
        for i in range(1, 12):
            plan = memory.prepare(_question(i))
            store.add_message(conv, "user", _question(i))
            if plan.marker:
                save_marker(store, plan.marker)
            reply = scripted_model(plan.messages)
            memory.record_reply(reply)
            store.add_message(conv, "assistant", reply)
        assert len(memory.markers) >= 2
        assert load_markers(store, conv) == memory.markers
        stored = store.messages(conv, limit=1000)
        assert sum(1 for m in stored if is_marker(m)) == len(memory.markers)
        assert sum(1 for m in stored if m.role == "user") == 11  # the full history is kept
        hits = store.search("condensed")
        assert [h.conversation_id for h in hits] == [conv]

        # Reopen: the rebuilt session is exactly what the live one was.
        history = [{"role": m.role, "content": m.content} for m in stored if not is_marker(m)]
        resumed = ConversationMemory.resume(
            conv,
            ContextMonitor(context_tokens=200),
            scripted_summarise,
            history,
            load_markers(store, conv),
        )
        assert resumed.session == memory.session
        assert resumed.session_id == memory.session_id
        assert resumed.history == memory.history
    finally:
        store.close()
