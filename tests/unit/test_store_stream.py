"""MessageStream: partial row at the first token, throttled rewrites, final write."""

from __future__ import annotations

from core.store import MessageStream, Store
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


class ManualClockForTests:
    """A clock the test advances by hand (time itself cannot be controlled here)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_row_until_the_first_non_empty_piece(store: Store) -> None:
    cid = store.create_conversation()
    stream = MessageStream(store, cid, model="gemma")
    stream.feed()
    stream.feed(text="", reasoning="")
    assert stream.message_id is None
    assert store.messages(cid) == []
    stream.feed(reasoning="thinking")
    row = store.get_message(stream.message_id)  # type: ignore[arg-type]
    assert row is not None and (row.status, row.reasoning, row.model) == ("partial", "thinking", "gemma")


def test_writes_are_throttled_to_the_interval(store: Store) -> None:
    cid = store.create_conversation()
    clock = ManualClockForTests()
    stream = MessageStream(store, cid, interval=0.25, clock=clock)
    stream.feed("a")
    for piece in "bcd":
        clock.now += 0.08
        stream.feed(piece)
    assert store.get_message(stream.message_id).content == "a"  # type: ignore[union-attr,arg-type]
    assert stream.writes == 1
    clock.now += 0.3
    stream.feed("e")
    assert store.get_message(stream.message_id).content == "abcde"  # type: ignore[union-attr,arg-type]
    assert (stream.flushed_text, stream.writes) == ("abcde", 2)


def test_finish_writes_final_text_status_and_usage(store: Store) -> None:
    cid = store.create_conversation()
    user = store.add_message(cid, "user", "hi")
    stream = MessageStream(store, cid, interval=3600)
    stream.feed("Hel")
    stream.feed("lo", reasoning="r")
    usage = {"prompt_tokens": 5, "cached_tokens": 0, "completion_tokens": 2, "ttft_ms": 12.0, "decode_tps": 30.5}
    calls = [{"id": "1", "name": "f", "arguments": {}}]
    assert stream.finish(usage=usage, tool_calls=calls) == stream.message_id
    row = store.get_message(stream.message_id)  # type: ignore[arg-type]
    assert row is not None
    assert (row.content, row.reasoning, row.status, row.usage, row.tool_calls) == ("Hello", "r", "complete", usage, calls)
    assert row.parent_id == user
    assert store.active_leaf(cid) == row.id


def test_error_before_any_token_still_records_the_error(store: Store) -> None:
    cid = store.create_conversation()
    stream = MessageStream(store, cid)
    mid = stream.finish(status="error", error="The model ran out of memory.")
    row = store.get_message(mid)  # type: ignore[arg-type]
    assert row is not None and (row.content, row.status, row.error) == ("", "error", "The model ran out of memory.")


def test_regenerate_stream_hangs_under_the_given_parent(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "q")
    first = store.add_message(cid, "assistant", "first")
    stream = MessageStream(store, cid, parent_id=q)
    stream.feed("second")
    stream.finish()
    assert [m.content for m in store.branches(first)] == ["first", "second"]
    assert [m.content for m in store.messages(cid)] == ["q", "second"]


def test_deleting_the_conversation_mid_stream_orphans_quietly(store: Store) -> None:
    cid = store.create_conversation()
    stream = MessageStream(store, cid, interval=0)
    stream.feed("a")
    store.delete_conversation(cid)
    stream.feed("b")
    assert stream.orphaned
    assert stream.finish() is None
    assert store.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_feed_after_finish_is_a_programming_error(store: Store) -> None:
    import pytest

    cid = store.create_conversation()
    stream = MessageStream(store, cid)
    stream.feed("x")
    stream.finish()
    with pytest.raises(RuntimeError):
        stream.feed("y")
