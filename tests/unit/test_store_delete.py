"""Deleting a message takes its replies with it, keeps search in step, and leaves the
conversation on a branch that still exists."""

from __future__ import annotations

from core.store import Store
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def _contents(store: Store, cid: str) -> list[str]:
    return [m.content for m in store.messages(cid)]


def test_deleting_a_message_removes_its_subtree_and_falls_back_to_the_parent(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "question")
    a = store.add_message(cid, "assistant", "answer")
    store.add_message(cid, "user", "follow-up")
    store.add_message(cid, "assistant", "second answer")
    assert store.delete_message(a) == 3
    assert _contents(store, cid) == ["question"]
    assert store.active_leaf(cid) == q
    # The conversation goes on from what is left.
    store.add_message(cid, "assistant", "fresh answer")
    assert _contents(store, cid) == ["question", "fresh answer"]


def test_deleted_text_is_gone_from_search_and_the_rest_still_found(store: Store) -> None:
    cid = store.create_conversation()
    store.add_message(cid, "user", "tell me about pelicans")
    a = store.add_message(cid, "assistant", "albatross wingspans are long")
    store.add_message(cid, "user", "and cormorants?")
    assert store.search("albatross") and store.search("cormorants")
    store.delete_message(a)
    assert store.search("albatross") == []
    assert store.search("cormorants") == []  # the reply below went too
    assert [h.conversation_id for h in store.search("pelicans")] == [cid]
    # The FTS index agrees with the table row for row (an out-of-sync external-content
    # index fails its integrity check).
    store.conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")


def test_deleting_the_active_branch_switches_to_the_newest_sibling(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "q")
    store.add_message(cid, "assistant", "a1")
    store.add_message(cid, "user", "more on a1")
    a2 = store.add_message(cid, "assistant", "a2", parent_id=q)
    a3 = store.add_message(cid, "assistant", "a3", parent_id=q)
    assert store.delete_message(a3) == 1
    assert _contents(store, cid) == ["q", "a2"]
    assert [m.id for m in store.branches(a2)][-1] == a2
    # Deleting a branch that is not shown leaves the shown one alone.
    a1 = store.branches(a2)[0].id
    assert store.delete_message(a1) == 2
    assert _contents(store, cid) == ["q", "a2"]
    assert [m.id for m in store.branches(a2)] == [a2]


def test_deleting_a_root_keeps_an_edited_root_branch(store: Store) -> None:
    cid = store.create_conversation()
    first = store.add_message(cid, "user", "first try")
    store.add_message(cid, "assistant", "reply")
    edited = store.edit_message(first, "second try")
    store.add_message(cid, "assistant", "reply two")
    assert store.delete_message(edited) == 2
    assert _contents(store, cid) == ["first try", "reply"]
    assert store.delete_message(first) == 2
    assert _contents(store, cid) == []
    assert store.active_leaf(cid) is None


def test_deleting_a_missing_message_is_a_no_op(store: Store) -> None:
    cid = store.create_conversation()
    m = store.add_message(cid, "user", "hello")
    assert store.delete_message(m) == 1
    assert store.delete_message(m) == 0
    assert store.delete_message("no-such-id") == 0
