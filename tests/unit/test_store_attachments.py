"""Attachments and chunks rows for the documents feature."""

from __future__ import annotations

import struct

import pytest

from core.store import Store, StoreError
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def test_attachments_and_chunks_round_trip(store: Store) -> None:
    cid = store.create_conversation()
    aid = store.add_attachment(cid, "report", "/docs/report.pdf", mime="application/pdf",
                               size=2048, text="full text")
    vector = struct.pack("3f", 0.1, 0.2, 0.3)
    assert store.add_chunks(aid, [("page one", "page 1", vector), ("page two", "page 2", None)]) == 2
    assert store.add_chunks(aid, [("page three", "page 3", None)]) == 1
    (attachment,) = store.attachments(cid)
    assert (attachment.id, attachment.alias, attachment.path, attachment.mime, attachment.size,
            attachment.text) == (aid, "report", "/docs/report.pdf", "application/pdf", 2048, "full text")
    chunks = store.chunks(aid)
    assert [(c.ordinal, c.text, c.source) for c in chunks] == [
        (0, "page one", "page 1"), (1, "page two", "page 2"), (2, "page three", "page 3")]
    assert chunks[0].embedding == vector and chunks[1].embedding is None
    store.set_chunk_embeddings([(chunks[1].id, vector)])
    assert store.chunks(aid)[1].embedding == vector
    assert [c.id for c in store.conversation_chunks(cid)] == [c.id for c in chunks]


def test_deleting_cascades_to_attachments_and_chunks(store: Store) -> None:
    cid = store.create_conversation()
    aid = store.add_attachment(cid, "a", "/a.txt", text="x")
    store.add_chunks(aid, [("x", None, None)])
    other = store.add_attachment(cid, "b", "/b.txt")
    store.delete_attachment(other)
    assert [a.alias for a in store.attachments(cid)] == ["a"]
    store.delete_conversation(cid)
    assert store.conn.execute("SELECT COUNT(*) FROM attachments").fetchone()[0] == 0
    assert store.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0


def test_attaching_to_a_deleted_conversation_says_so(store: Store) -> None:
    cid = store.create_conversation()
    aid = store.add_attachment(cid, "a", "/a.txt")
    store.delete_conversation(cid)
    with pytest.raises(StoreError) as info:
        store.add_attachment(cid, "b", "/b.txt")
    assert info.value.code == "NOT_FOUND"
    with pytest.raises(StoreError) as info:
        store.add_chunks(aid, [("x", None, None)])
    assert info.value.code == "NOT_FOUND"
