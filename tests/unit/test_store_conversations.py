"""Conversations and messages: the API the runtime and the sidebar use."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.store import Store, StoreError, auto_title
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def test_open_creates_a_wal_database_with_foreign_keys(store: Store, store_path: Path) -> None:
    assert store_path.exists()
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_open_without_a_path_uses_llmdeck_home(store_path: Path) -> None:
    with Store.open() as opened:
        assert opened.path == store_path
    assert store_path.exists()


def test_reopen_keeps_conversations(store_path: Path) -> None:
    with Store.open(store_path) as first:
        cid = first.create_conversation("Kept", model="gemma")
        first.add_message(cid, "user", "hello")
    with Store.open(store_path) as second:
        conversation = second.get_conversation(cid)
        assert conversation is not None
        assert (conversation.title, conversation.model, conversation.message_count) == ("Kept", "gemma", 1)


def test_list_is_newest_activity_first_and_pages(store: Store) -> None:
    ids = [store.create_conversation(f"c{i}") for i in range(5)]
    store.add_message(ids[1], "user", "bump")
    listed = [c.id for c in store.list_conversations()]
    assert listed == [ids[1], ids[4], ids[3], ids[2], ids[0]]
    assert [c.id for c in store.list_conversations(limit=2, offset=2)] == [ids[3], ids[2]]


def test_add_message_updates_activity_and_count(store: Store) -> None:
    cid = store.create_conversation()
    before = store.get_conversation(cid)
    store.add_message(cid, "user", "hi")
    after = store.get_conversation(cid)
    assert before is not None and after is not None
    assert after.updated_at >= before.updated_at
    assert (before.message_count, after.message_count) == (0, 1)


def test_first_user_message_titles_an_untitled_conversation(store: Store) -> None:
    cid = store.create_conversation()
    store.add_message(cid, "system", "You are terse.")
    assert store.get_conversation(cid).title is None  # type: ignore[union-attr]
    store.add_message(cid, "user", "\n  How do   I parse TOML?\nmore detail")
    store.add_message(cid, "user", "second question")
    assert store.get_conversation(cid).title == "How do I parse TOML?"  # type: ignore[union-attr]


def test_explicit_title_is_not_overwritten(store: Store) -> None:
    cid = store.create_conversation("Mine")
    store.add_message(cid, "user", "something else")
    assert store.get_conversation(cid).title == "Mine"  # type: ignore[union-attr]


def test_auto_title_truncates_at_a_word_with_an_ellipsis() -> None:
    long = "word " * 40
    title = auto_title(long)
    assert title.endswith("…") and len(title) <= 60
    assert not title[:-1].endswith(" ")
    assert auto_title("   \n\n") == "New conversation"
    assert auto_title("short") == "short"


def test_rename_and_delete(store: Store) -> None:
    cid = store.create_conversation("old")
    store.add_message(cid, "user", "x")
    store.rename_conversation(cid, "  new  ")
    assert store.get_conversation(cid).title == "new"  # type: ignore[union-attr]
    store.delete_conversation(cid)
    assert store.get_conversation(cid) is None
    assert store.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    store.delete_conversation(cid)  # deleting twice is harmless


def test_rename_a_deleted_conversation_says_so(store: Store) -> None:
    cid = store.create_conversation()
    store.delete_conversation(cid)
    with pytest.raises(StoreError) as info:
        store.rename_conversation(cid, "x")
    assert info.value.code == "NOT_FOUND"
    assert "deleted" in info.value.message


def test_adding_to_a_deleted_conversation_says_so(store: Store) -> None:
    cid = store.create_conversation()
    store.delete_conversation(cid)
    with pytest.raises(StoreError) as info:
        store.add_message(cid, "user", "hello?")
    assert info.value.code == "NOT_FOUND"


def test_messages_round_trip_every_field(store: Store) -> None:
    cid = store.create_conversation()
    usage = {"prompt_tokens": 12, "cached_tokens": 4, "completion_tokens": 30,
             "ttft_ms": 81.5, "decode_tps": 42.0}
    calls = [{"id": "c1", "name": "search", "arguments": {"q": "x"}}]
    user = store.add_message(cid, "user", "q")
    mid = store.add_message(cid, "assistant", "a", model="gemma", reasoning="hmm",
                            tool_calls=calls, usage=usage, status="error", error="boom")
    tool = store.add_message(cid, "tool", "result", tool_results=[{"id": "c1", "output": "ok"}])
    got = store.messages(cid)
    assert [m.id for m in got] == [user, mid, tool]
    message = got[1]
    assert (message.role, message.content, message.reasoning, message.model) == ("assistant", "a", "hmm", "gemma")
    assert message.tool_calls == calls and message.usage == usage
    assert (message.status, message.error, message.parent_id) == ("error", "boom", user)
    assert got[2].tool_results == [{"id": "c1", "output": "ok"}]
    assert store.get_message(mid) == message


def test_update_message_sets_only_given_fields(store: Store) -> None:
    cid = store.create_conversation()
    mid = store.add_message(cid, "assistant", "par", status="partial", reasoning="r")
    store.update_message(mid, content="partial text")
    got = store.get_message(mid)
    assert got is not None and (got.content, got.reasoning, got.status) == ("partial text", "r", "partial")
    store.update_message(mid, status="complete", usage={"completion_tokens": 2}, tool_calls=[])
    got = store.get_message(mid)
    assert got is not None and (got.status, got.usage, got.tool_calls) == ("complete", {"completion_tokens": 2}, [])


def test_update_of_a_deleted_message_says_so(store: Store) -> None:
    cid = store.create_conversation()
    mid = store.add_message(cid, "user", "x")
    store.delete_conversation(cid)
    with pytest.raises(StoreError) as info:
        store.update_message(mid, content="y")
    assert info.value.code == "NOT_FOUND"


def test_bad_role_and_status_are_programming_errors(store: Store) -> None:
    cid = store.create_conversation()
    with pytest.raises(ValueError):
        store.add_message(cid, "robot", "x")
    with pytest.raises(ValueError):
        store.add_message(cid, "user", "x", status="done")


def test_pagination_walks_back_through_the_active_branch(store: Store) -> None:
    cid = store.create_conversation()
    ids = [store.add_message(cid, "user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(120)]
    last = store.messages(cid)
    assert [m.id for m in last] == ids[-50:]
    older = store.messages(cid, before=last[0].id)
    assert [m.id for m in older] == ids[20:70]
    oldest = store.messages(cid, before=older[0].id)
    assert [m.id for m in oldest] == ids[:20]
    assert store.messages(cid, before=ids[0]) == []
    assert [m.id for m in store.messages(cid, limit=3)] == ids[-3:]
    assert store.messages(cid, limit=0) == []


def test_messages_of_unknown_or_empty_conversation_are_empty(store: Store) -> None:
    assert store.messages("nope") == []
    assert store.messages(store.create_conversation()) == []


def test_store_is_usable_from_another_thread(store: Store) -> None:
    import threading

    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(store.create_conversation("t")))
    worker.start()
    worker.join()
    assert store.get_conversation(result[0]) is not None


def test_a_held_write_lock_becomes_a_locked_error(store_path: Path) -> None:
    with Store.open(store_path, busy_timeout_ms=50) as opened:
        other = sqlite3.connect(store_path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(StoreError) as info:
                opened.create_conversation()
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert info.value.code == "LOCKED"
        assert "another llmdeck" in info.value.message
        assert opened.create_conversation()  # usable again once the lock is gone


def test_model_title_replaces_the_auto_title_but_never_the_users(store: Store) -> None:
    auto = store.create_conversation()
    store.add_message(auto, "user", "tell me about the moon landing in detail please")
    assert store.set_generated_title(auto, '  "Apollo 11 landing"\n')
    assert store.get_conversation(auto).title == "Apollo 11 landing"  # type: ignore[union-attr]
    assert store.set_generated_title(auto, "Moon landing")  # a later model title may refine it
    named = store.create_conversation("My notes")
    assert not store.set_generated_title(named, "Something else")
    renamed = store.create_conversation()
    store.add_message(renamed, "user", "hello")
    store.rename_conversation(renamed, "Greetings")
    assert not store.set_generated_title(renamed, "Hello chat")
    assert store.get_conversation(renamed).title == "Greetings"  # type: ignore[union-attr]
    assert not store.set_generated_title(auto, "   ")


def test_a_full_disk_is_reported_and_nothing_half_written(store: Store) -> None:
    cid = store.create_conversation()
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    # Cap the file at its current size: the next growth fails exactly like a full disk.
    store.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError) as info:
        store.add_message(cid, "user", "x" * 200_000)
    assert info.value.code == "DISK_FULL"
    assert "free some space" in info.value.message
    assert store.messages(cid) == []
    assert store.get_conversation(cid).title is None  # type: ignore[union-attr]


def test_two_stores_on_one_file_see_each_others_writes(store_path: Path) -> None:
    with Store.open(store_path) as one, Store.open(store_path) as two:
        cid = one.create_conversation("shared")
        two.add_message(cid, "user", "from two")
        assert [m.content for m in one.messages(cid)] == ["from two"]
