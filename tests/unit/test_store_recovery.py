"""A garbage or damaged database file is moved aside at start, never used, never lost.

Real SQLite files damaged the way disks and careless copies damage them: random bytes
instead of a database, and pages of the messages table overwritten in place.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from core.store import Store, StoreError, check_store, open_store
from core.store.errors import NOT_A_DATABASE
from tests.fixtures.store import damage_pages_of, store_path_fixture  # noqa: F401


def _history(path: Path, conversations: int = 60, replies: int = 4) -> list[str]:
    """A real history whose messages fill many pages (long replies)."""
    ids = []
    with Store.open(path) as store:
        for n in range(conversations):
            cid = store.create_conversation(model="m")
            for r in range(replies):
                store.add_message(cid, "user", f"question {n}.{r} about sourdough")
                store.add_message(cid, "assistant", f"answer {n}.{r} " + "crumb " * 300)
            ids.append(cid)
    return ids


def test_a_sound_database_passes_the_check_untouched(store_path: Path) -> None:
    _history(store_path, conversations=3)
    store = open_store(store_path)
    checked = check_store(store, on_damage=lambda: pytest.fail("a sound file is not damaged"))
    assert checked is store and checked.recovery is None
    assert len(checked.list_conversations()) == 3
    checked.close()
    assert not list(store_path.parent.glob("*.damaged-*"))


def test_a_garbage_file_is_moved_aside_and_a_fresh_database_opened(store_path: Path) -> None:
    store_path.parent.mkdir(parents=True, exist_ok=True)
    garbage = os.urandom(64 * 1024)
    store_path.write_bytes(garbage)
    with pytest.raises(StoreError) as raised:
        Store.open(store_path)  # what the app used to hit, and then never loaded a model
    assert raised.value.code == NOT_A_DATABASE
    store = check_store(open_store(store_path))
    try:
        recovery = store.recovery
        assert recovery is not None
        assert recovery.moved_to.read_bytes() == garbage  # nothing lost
        assert str(recovery.moved_to) in recovery.message and "new one" in recovery.message
        cid = store.create_conversation("works")
        assert store.get_conversation(cid) is not None
    finally:
        store.close()
    assert Store.open(store_path).list_conversations()[0].title == "works"


def test_damaged_message_pages_are_detected_and_the_readable_rows_recovered(
        store_path: Path) -> None:
    ids = _history(store_path)
    damaged = damage_pages_of(store_path, "messages")
    assert damaged >= 3
    store = open_store(store_path)  # the header is fine: it opens...
    assert store.quick_check()  # ...and the check sees the damage
    told: list[bool] = []
    store = check_store(store, on_damage=lambda: told.append(store_path.exists()))
    assert told == [True]  # said before the file was moved and the copying began
    try:
        recovery = store.recovery
        assert recovery is not None and recovery.moved_to.exists()
        assert recovery.conversations == 60  # their table was not hit
        assert 0 < recovery.messages < 60 * 8  # the damaged pages' rows are gone, the rest not
        assert f"{recovery.messages:,} messages were recovered" in recovery.message
        assert store.quick_check() == []
        # Every conversation opens (the crash was here) and search finds recovered text.
        for cid in ids:
            for message in store.messages(cid):
                assert message.conversation_id == cid
        assert store.search("sourdough")
        assert sum(c.message_count for c in store.list_conversations(limit=100)) \
            == recovery.messages
    finally:
        store.close()


def test_damaged_conversation_pages_leave_their_messages_findable(store_path: Path) -> None:
    _history(store_path, conversations=400, replies=1)
    damage_pages_of(store_path, "conversations", share=0.3)
    store = check_store(open_store(store_path))
    try:
        assert store.recovery is not None
        assert store.recovery.messages == 800  # no message page was hit
        titles = [c.title for c in store.list_conversations(limit=1000)]
        assert len(titles) == 400 and "Recovered conversation" in titles
        for conv in store.list_conversations(limit=1000):
            assert store.messages(conv.id)  # each has its question and answer
    finally:
        store.close()


def test_a_damaged_search_index_is_rebuilt_from_the_messages(store_path: Path) -> None:
    """Damage quick_check cannot see (FTS5's own blobs overwritten, the b-tree intact): the
    first search rebuilds the index from the messages and answers."""
    _history(store_path, conversations=5)
    conn = sqlite3.connect(store_path)
    for table in ("messages_fts_data", "titles_fts_data"):
        conn.execute(f"UPDATE {table} SET block = randomblob(length(block)) WHERE id > 1")
    conn.commit()
    with pytest.raises((sqlite3.DatabaseError, MemoryError)):  # what reached the search box
        conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'sourdough'")
    conn.close()
    store = check_store(open_store(store_path))
    try:
        assert store.recovery is None  # the file itself is sound
        assert len(store.search("sourdough")) == 5
        assert len(store.search("crumb")) == 5
    finally:
        store.close()


def test_an_index_whose_damage_asks_for_impossible_memory_is_rebuilt_too(store_path: Path) -> None:
    """A structure record claiming a level of 2^31 segments makes FTS5 fail with
    SQLITE_NOMEM, which sqlite3 raises as MemoryError, on a search and on 'rebuild' alike
    (random damage met it in CI): the search still rebuilds the index and answers."""
    _history(store_path, conversations=5)
    conn = sqlite3.connect(store_path)
    for table in ("messages_fts_data", "titles_fts_data"):  # cookie, 1 level, 5 segments, ...
        conn.execute(f"UPDATE {table} SET block = X'000000000105050087FFFFFF7F' WHERE id = 10")
    conn.commit()
    with pytest.raises(MemoryError):
        conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'sourdough'")
    conn.close()
    store = check_store(open_store(store_path))
    try:
        assert len(store.search("sourdough")) == 5
        assert len(store.search("crumb")) == 5
    finally:
        store.close()
