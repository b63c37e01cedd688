"""Opening older databases upgrades them in one transaction; newer ones are refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.store import SCHEMA_VERSION, Store, StoreError
from core.store.schema import MIGRATIONS

# Schema 1 as llmdeck shipped it, written out by hand: the test must not depend on the
# migration code it is testing.
SCHEMA_1 = [
    """CREATE TABLE conversations (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
        title TEXT, model TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL,
        active_leaf_id TEXT)""",
    "CREATE INDEX conversations_activity ON conversations(updated_at, seq)",
    """CREATE TABLE messages (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id TEXT REFERENCES messages(id) ON DELETE CASCADE, role TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT '', reasoning TEXT NOT NULL DEFAULT '', tool_calls TEXT,
        tool_results TEXT, usage TEXT, model TEXT, status TEXT NOT NULL DEFAULT 'complete',
        error TEXT, created_at REAL NOT NULL)""",
    "CREATE INDEX messages_conversation ON messages(conversation_id, seq)",
    "CREATE INDEX messages_parent ON messages(parent_id)",
]


def _make_v1(path: Path, *extra: str) -> None:
    conn = sqlite3.connect(path)
    for statement in SCHEMA_1:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO conversations (id, title, created_at, updated_at, active_leaf_id) "
        "VALUES ('c1', 'Old greenhouse notes', 1.0, 2.0, NULL)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, created_at) "
        "VALUES ('m1', 'c1', NULL, 'user', 'tomatoes need warmth', 1.0)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status, created_at) "
        "VALUES ('m2', 'c1', 'm1', 'assistant', 'keep them above fifteen degrees', 'partial', 2.0)"
    )
    for statement in extra:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_schema_one_is_what_migration_one_creates(tmp_path: Path) -> None:
    # Guards the hand-written copy above against drift from the real first migration.
    ours, theirs = sqlite3.connect(tmp_path / "a.db"), sqlite3.connect(tmp_path / "b.db")
    for statement in SCHEMA_1:
        ours.execute(statement)
    for statement in MIGRATIONS[0]:
        theirs.execute(statement)
    dump = "SELECT type, name, tbl_name FROM sqlite_master ORDER BY name"
    assert ours.execute(dump).fetchall() == theirs.execute(dump).fetchall()
    cols = "SELECT name, type, \"notnull\", dflt_value FROM pragma_table_info(?)"
    for table in ("conversations", "messages"):
        assert ours.execute(cols, (table,)).fetchall() == theirs.execute(cols, (table,)).fetchall()


def test_old_database_is_upgraded_and_its_history_becomes_searchable(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _make_v1(path)
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        messages = store.messages("c1")
        assert [m.content for m in messages] == ["tomatoes need warmth", "keep them above fifteen degrees"]
        assert messages[1].status == "partial"
        assert store.conn.execute("SELECT title_source FROM conversations").fetchone()[0] == "user"
        assert [h.message_id for h in store.search("fifteen")] == ["m2"]
        assert [h.conversation_id for h in store.search("greenhouse")] == ["c1"]
        # Tables of later migrations work.
        assert store.attachments("c1") == []
        store.add_attachment("c1", "notes", "/tmp/notes.txt", text="soil")
        store.add_message("c1", "user", "and peppers?")
        assert store.messages("c1")[-1].parent_id == "m2"
    with Store.open(path) as again:  # reopening an up-to-date file changes nothing
        assert again.schema_version == SCHEMA_VERSION


def test_failed_upgrade_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "clash.db"
    # An object already named like one that migration 2 creates makes it fail midway.
    _make_v1(path, "CREATE TABLE titles_fts (x)")
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert info.value.code == "MIGRATION_FAILED"
    assert "unchanged" in info.value.message
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "messages_fts" not in names and "messages_fts_insert" not in names
    assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2


def test_newer_database_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with Store.open(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert info.value.code == "SCHEMA_TOO_NEW"
    assert info.value.message == (
        f"This database was written by a newer llmdeck (schema {SCHEMA_VERSION + 1}); "
        "upgrade llmdeck to open it."
    )


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is certainly not sqlite" * 100)
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert info.value.code == "NOT_A_DATABASE"
    assert "move it aside" in info.value.message
    assert path.read_bytes().startswith(b"this is certainly")


def test_a_folder_in_place_of_the_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path)
    assert info.value.code == "NOT_A_DATABASE"


def test_an_unwritable_location_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        Store.open(blocker / "sub" / "llmdeck.db")  # parent "folder" is a file
    assert info.value.code == "CANNOT_OPEN"
    assert "writable" in info.value.message


def test_damage_found_after_opening_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    with Store.open(path) as store:
        cid = store.create_conversation("x")
        for i in range(300):
            store.add_message(cid, "user", f"message {i} " + "padding " * 50)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(path.read_bytes())
    page = 4096
    # Scribble over every page but the first (the header and schema stay readable).
    for offset in range(page * 2, len(raw), page):
        raw[offset : offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError) as info:
        with Store.open(path) as store:
            store.messages(cid)
            store.list_conversations()
            store.add_message(cid, "user", "more")
    assert info.value.code == "NOT_A_DATABASE"
    assert "damaged" in info.value.message
