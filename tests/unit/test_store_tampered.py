"""A database another program edited: SQLite's integrity check passes, but a column holds
a blob where text goes, JSON of another shape, a dangling active-leaf pointer or a parent
cycle. Every read still answers (the garbled part reads as absent), every walk of the
branch tree ends, and the next message appends (real SQLite files)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from core.store import Store


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str, list[str]]:
    path = tmp_path / "llmdeck.db"
    with Store.open(path) as store:
        cid = store.create_conversation(title="sourdough")
        ids = [store.add_message(cid, "user", "How long does sourdough rise?"),
               store.add_message(cid, "assistant", "About eight hours.",
                                 usage={"prompt_tokens": 9, "completion_tokens": 4,
                                        "cached_tokens": 0, "ttft_ms": 20.0, "decode_tps": 30.0})]
    return path, cid, ids


def tamper(path: Path, *sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    for statement in sql:
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("sql", [
    "UPDATE messages SET tool_calls = 'not json', tool_results = '[1, {\"ok\": true}]'",
    "UPDATE messages SET usage = '[1, 2]'",
    "UPDATE messages SET usage = '{\"prompt_tokens\": \"many\", \"completion_tokens\": 4}'",
    "UPDATE messages SET content = x'fffe00', reasoning = 42, model = x'ff'",
    "UPDATE messages SET created_at = 'yesterday', role = 'alien'",
], ids=["bad-json", "usage-list", "usage-text", "blobs", "odd-columns"])
def test_garbled_columns_read_as_absent_and_the_rest_stays(db, sql: str) -> None:
    path, cid, ids = db
    tamper(path, sql, "UPDATE conversations SET title = x'ff00', updated_at = 'soon'")
    with Store.open(path) as store:
        messages = store.messages(cid)
        assert [m.id for m in messages] == ids
        for m in messages:
            assert isinstance(m.content, str) and isinstance(m.reasoning, str)
            assert isinstance(m.created_at, float) and isinstance(m.role, str)
            assert m.tool_calls is None or all(isinstance(c, dict) for c in m.tool_calls)
            assert m.tool_results is None or all(isinstance(r, dict) for r in m.tool_results)
            usage = m.usage or {}
            assert all(isinstance(usage[k], int | float) for k in usage if k.endswith("tokens"))
        [conv] = store.list_conversations()
        assert isinstance(conv.title, str) and isinstance(conv.updated_at, float)
        exported = json.loads(store.export_json(cid))  # the export reads rows the same way
        assert [m["id"] for m in exported["messages"]] == ids
        assert isinstance(exported["conversation"]["title"], str) and store.export_markdown(cid)
        hits = store.search("sourdough")  # the question's text, unless it became a blob
        assert all(isinstance(h.title, str) for h in hits) and (hits or "fffe" in sql)
        store.add_message(cid, "user", "And at room temperature?")
        assert len(store.messages(cid)) == 3


def test_a_dangling_active_leaf_shows_the_history_and_the_next_message_appends(db) -> None:
    path, cid, ids = db
    tamper(path, "UPDATE conversations SET active_leaf_id = 'gone'")
    with Store.open(path) as store:
        assert store.active_leaf(cid) == ids[-1]
        assert [m.id for m in store.messages(cid)] == ids
        new = store.add_message(cid, "user", "Still there?")
        assert store.get_message(new).parent_id == ids[-1]
        assert [m.id for m in store.messages(cid)] == [*ids, new]


@pytest.mark.timeout(60)
def test_every_walk_of_a_parent_cycle_ends(db) -> None:
    path, cid, ids = db
    user, reply = ids
    tamper(path, f"UPDATE messages SET parent_id = '{reply}' WHERE id = '{user}'")
    with Store.open(path) as store:
        assert len(store.messages(cid, limit=20)) <= 20
        assert store.switch_branch(user) in ids
        store.delete_message(reply)
        assert store.messages(cid) == []
