"""Edit and regenerate make sibling branches; the conversation shows the active one."""

from __future__ import annotations

import pytest

from core.store import Store, StoreError
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def _contents(store: Store, cid: str) -> list[str]:
    return [m.content for m in store.messages(cid)]


def test_regenerate_adds_a_sibling_that_becomes_active(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "question")
    a1 = store.add_message(cid, "assistant", "answer one")
    a2 = store.add_message(cid, "assistant", "answer two", parent_id=q)
    assert _contents(store, cid) == ["question", "answer two"]
    assert [m.id for m in store.branches(a1)] == [a1, a2]
    assert [m.id for m in store.branches(a2)] == [a1, a2]


def test_switch_branch_follows_the_newest_path_below(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "q")
    a1 = store.add_message(cid, "assistant", "a1")
    store.add_message(cid, "user", "follow-up on a1")
    deep = store.add_message(cid, "assistant", "reply on a1")
    store.add_message(cid, "assistant", "a2", parent_id=q)
    assert _contents(store, cid) == ["q", "a2"]
    assert store.switch_branch(a1) == deep
    assert _contents(store, cid) == ["q", "a1", "follow-up on a1", "reply on a1"]
    assert store.active_leaf(cid) == deep
    # New messages continue the branch now active.
    store.add_message(cid, "user", "more")
    assert _contents(store, cid)[-2:] == ["reply on a1", "more"]


def test_edit_keeps_the_original_as_another_branch(store: Store) -> None:
    cid = store.create_conversation()
    store.add_message(cid, "system", "sys")
    u = store.add_message(cid, "user", "typo quesiton")
    store.add_message(cid, "assistant", "answer to typo")
    edited = store.edit_message(u, "typo question")
    assert _contents(store, cid) == ["sys", "typo question"]
    assert [m.content for m in store.branches(edited)] == ["typo quesiton", "typo question"]
    store.switch_branch(u)
    assert _contents(store, cid) == ["sys", "typo quesiton", "answer to typo"]


def test_editing_the_first_message_makes_a_new_root(store: Store) -> None:
    cid = store.create_conversation()
    first = store.add_message(cid, "user", "first")
    store.add_message(cid, "assistant", "reply")
    root2 = store.edit_message(first, "first, edited")
    assert _contents(store, cid) == ["first, edited"]
    assert [m.id for m in store.branches(first)] == [first, root2]
    assert store.get_message(root2).parent_id is None  # type: ignore[union-attr]


def test_branches_pages_before_the_switched_leaf(store: Store) -> None:
    cid = store.create_conversation()
    ids = [store.add_message(cid, "user", f"m{i}") for i in range(10)]
    store.add_message(cid, "user", "alt", parent_id=ids[4])
    assert _contents(store, cid) == [f"m{i}" for i in range(5)] + ["alt"]
    store.switch_branch(ids[5])
    page = store.messages(cid, limit=3)
    assert [m.id for m in page] == ids[7:]
    assert [m.id for m in store.messages(cid, limit=3, before=page[0].id)] == ids[4:7]


def test_switching_to_a_deleted_message_says_so(store: Store) -> None:
    cid = store.create_conversation()
    mid = store.add_message(cid, "user", "x")
    store.delete_conversation(cid)
    with pytest.raises(StoreError) as info:
        store.switch_branch(mid)
    assert info.value.code == "NOT_FOUND"
    with pytest.raises(StoreError):
        store.edit_message(mid, "y")


def test_parent_from_another_conversation_is_refused(store: Store) -> None:
    one, two = store.create_conversation(), store.create_conversation()
    foreign = store.add_message(one, "user", "x")
    with pytest.raises(ValueError):
        store.add_message(two, "user", "y", parent_id=foreign)


def test_switching_to_a_message_on_the_active_branch_keeps_it(store: Store) -> None:
    cid = store.create_conversation()
    q = store.add_message(cid, "user", "q")
    store.add_message(cid, "assistant", "a1")
    store.add_message(cid, "assistant", "a2", parent_id=q)
    a1 = store.branches(store.messages(cid)[-1].id)[0].id
    follow = store.add_message(cid, "user", "on a1", parent_id=a1)
    # The newest child of q is a2, but q is on the active path through a1: stay there.
    assert store.switch_branch(q) == follow
    assert _contents(store, cid) == ["q", "a1", "on a1"]


def test_opening_at_a_search_hit_and_paging_both_ways(store: Store) -> None:
    cid = store.create_conversation()
    ids = [store.add_message(cid, "user", f"m{i}") for i in range(200)]
    hit = ids[30]
    page = store.messages_through(cid, hit, limit=10)
    assert [m.id for m in page] == ids[21:31]
    assert [m.id for m in store.messages(cid, limit=10, before=page[0].id)] == ids[11:21]
    assert [m.id for m in store.messages_after(cid, page[-1].id, limit=10)] == ids[31:41]
    assert [m.id for m in store.messages_after(cid, ids[195], limit=10)] == ids[196:]
    assert store.messages_after(cid, ids[-1]) == []


def test_paging_helpers_ignore_messages_off_the_branch_or_elsewhere(store: Store) -> None:
    cid = store.create_conversation()
    root = store.add_message(cid, "user", "root")
    off = store.add_message(cid, "assistant", "old answer")
    store.add_message(cid, "assistant", "new answer", parent_id=root)
    assert store.messages_after(cid, off) == []
    other = store.create_conversation()
    assert store.messages_through(other, off) == []
    assert store.messages_through(cid, off, limit=0) == []
