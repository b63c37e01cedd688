"""Long replies through the real Runtime (worker process, pool, SQLite), issue 46:
a reply that hits its length limit is stored cut and continues in place; a context
overflow is retried once, silently, with a rolled-over context."""

from __future__ import annotations

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, Error, TextDelta, Usage
from core.runtime import Runtime, context_use

FIRST = "One two three four five six seven eight nine ten."  # 13 pieces of 4 characters
REST = " The end."


def _runtime(context: int = 4096, max_tokens: int = 0, replies=(FIRST, REST)) -> Runtime:
    spec = ModelSpec(path="scripted", engine="scripted", context_size=context,
                     options=(("replies", replies), ("fixed_timing", True)))
    settings = Settings(context_size=context)
    settings.sampling.max_tokens = max_tokens
    return Runtime(settings, model_spec=spec)


async def _events(turn) -> list:
    return [e async for e in turn.events()]


async def test_a_cut_reply_is_stored_cut_and_continues_in_the_same_message() -> None:
    rt = _runtime(max_tokens=4)
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Count to ten, please.")
        events = await _events(turn)
        assert events[-1] == Done("length")
        cid, mid = turn.conversation_id, turn.assistant_message_id
        stored = (await rt.messages(cid))[-1]
        assert (stored.id, stored.status, stored.content) == (mid, "cut", FIRST[:16])
        assert stored.usage["completion_tokens"] == 4

        more = await rt.continue_reply(cid, mid)
        assert more.request.reply_prefix == FIRST[:16]  # the model goes on from its text
        assert more.request.session_id == turn.request.session_id  # its cached prefix
        assert more.request.messages == turn.request.messages
        events = await _events(more)
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == REST
        assert events[-1] == Done("stop")
        assert more.assistant_message_id == mid
        messages = await rt.messages(cid)
        assert [m.role for m in messages] == ["user", "assistant"]  # appended, not added
        assert (messages[-1].content, messages[-1].status) == (FIRST[:16] + REST, "complete")
        assert messages[-1].usage["completion_tokens"] == 4 + 3  # the whole reply's count
        # the header's ctx: what the last generation filled, not the whole reply twice
        assert context_use(messages) == messages[-1].usage["prompt_tokens"] + 3
    finally:
        await rt.close()


async def test_only_a_cut_reply_can_be_continued() -> None:
    rt = _runtime()
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Hello")
        assert (await _events(turn))[-1] == Done("stop")
        try:
            await rt.continue_reply(turn.conversation_id, turn.assistant_message_id)
        except LookupError as exc:
            assert "cut at its length limit" in str(exc)
        else:
            raise AssertionError("a finished reply was continued")
    finally:
        await rt.close()


async def test_without_a_max_tokens_setting_a_reply_runs_to_the_room_left() -> None:
    long_reply = "word " * 400  # 500 pieces: more than the context holds
    rt = _runtime(context=256, replies=(long_reply,))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Talk.")
        events = await _events(turn)
        usage = next(e for e in events if isinstance(e, Usage))
        assert events[-1] == Done("length")
        assert usage.prompt_tokens + usage.completion_tokens == 256  # not 1,024, not less
        stored = (await rt.messages(turn.conversation_id))[-1]
        assert stored.status == "cut"
    finally:
        await rt.close()


async def test_a_context_overflow_is_retried_once_with_a_rolled_context() -> None:
    rt = _runtime(context=1000, replies=("Noted.",))
    await rt.start()
    try:
        cid, retried = None, None
        for i in range(16):
            if cid is not None:  # the estimate is far too low: the memory never rolls over
                rt.chat.monitor()._scale[cid] = 0.25
            turn = await rt.start_turn(cid, f"Fact {i}: " + "the archive holds boxes " * 12)
            cid = turn.conversation_id
            events = await _events(turn)
            assert not [e for e in events if isinstance(e, Error)], events
            assert events[-1] == Done("stop")
            if turn.overflow_retries:
                retried = (i, turn)
                break
        assert retried is not None, "the context never overflowed"
        i, turn = retried
        assert turn.overflow_retries == 1 and turn.rollover is None
        assert len(turn.request.messages) <= 3  # the rolled context: summary and question
        stored = await rt.messages(cid, limit=100)
        assert sum(1 for m in stored if m.role == "user") == i + 1  # the history stays whole
    finally:
        await rt.close()


async def test_a_reply_that_filled_the_context_stays_cut_and_g_says_what_would_help() -> None:
    """A reply that ran to the end of the context cannot go on: the model would start with
    its context full, the engine refuses, and the reply was stored as failed. It is stored
    saying it filled the context, and continuing it is refused with what to do, before
    the model is asked; the reply stays cut, whole."""
    rt = _runtime(context=256, replies=("word " * 400,))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Talk.")
        assert (await _events(turn))[-1] == Done("length")
        cid, mid = turn.conversation_id, turn.assistant_message_id
        stored = (await rt.messages(cid))[-1]
        assert stored.usage["context_used"] == stored.usage["context_size"] == 256
        try:
            await rt.continue_reply(cid, mid)
        except LookupError as exc:
            assert "filled the model's whole context (256 tokens)" in str(exc)
            assert "Raise the context size" in str(exc)
        else:
            raise AssertionError("a reply with no room left was continued")
        after = (await rt.messages(cid))[-1]
        assert (after.status, after.content) == ("cut", stored.content)
    finally:
        await rt.close()
