"""Export to Markdown and JSON; importing the JSON back reproduces the conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.store import MessageStream, Store, StoreError
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def _rich_conversation(store: Store) -> str:
    cid = store.create_conversation(model="gemma-3-270m")
    store.add_message(cid, "system", "Be brief.")
    q = store.add_message(cid, "user", "Name a prime > 10 — and «quote» \"this\"\nsecond line")
    store.add_message(cid, "assistant", "11", model="gemma", reasoning="small primes: 11, 13",
                      usage={"prompt_tokens": 9, "cached_tokens": 0, "completion_tokens": 1,
                             "ttft_ms": 10.25, "decode_tps": 50.0})
    stream = MessageStream(store, cid, parent_id=q, model="gemma")
    stream.feed("13, using a tool")
    stream.finish(tool_calls=[{"id": "t1", "name": "is_prime", "arguments": {"n": 13}}])
    store.add_message(cid, "tool", "true", tool_results=[{"id": "t1", "output": True}])
    failed = MessageStream(store, cid)
    failed.feed("half an ans")
    failed.finish(status="error", error="Worker crashed")
    store.add_attachment(cid, "paper", "/docs/paper.pdf", mime="application/pdf", size=1234,
                         text="Abstract: primes.")
    return cid


def test_json_round_trip_is_exact(store: Store, tmp_path: Path) -> None:
    cid = _rich_conversation(store)
    exported = store.export_json(cid)
    with Store.open(tmp_path / "other.db") as other:
        assert other.import_json(exported) == cid
        assert other.export_json(cid) == exported
        assert other.messages(cid) == store.messages(cid)
        assert other.get_conversation(cid) == store.get_conversation(cid)
        assert other.attachments(cid) == store.attachments(cid)
        assert [h.conversation_id for h in other.search("prime")] == [cid]


def test_importing_into_the_same_database_makes_a_copy_with_fresh_ids(store: Store) -> None:
    cid = _rich_conversation(store)
    copy = store.import_json(store.export_json(cid))
    assert copy != cid
    original, copied = store.messages(cid), store.messages(copy)
    assert [m.content for m in copied] == [m.content for m in original]
    assert {m.id for m in copied}.isdisjoint({m.id for m in original})
    assert copied[-1].parent_id == copied[-2].id
    assert len(store.list_conversations()) == 2
    # Branches survived the remap too.
    assert [m.content for m in store.branches(copied[2].id)] == ["11", "13, using a tool"]


def test_markdown_export_shows_the_active_branch(store: Store) -> None:
    cid = _rich_conversation(store)
    text = store.export_markdown(cid)
    assert text.startswith("# Name a prime > 10")
    assert "## User" in text and "## Assistant (gemma)" in text
    assert "13, using a tool" in text and '"is_prime"' in text
    assert "11" not in text.splitlines()  # the other branch is left out
    assert "## Assistant [error]" in text and "> Error: Worker crashed" in text
    assert "<details><summary>Reasoning</summary>" not in text  # the active branch has none
    first_answer = store.branches(store.messages(cid)[2].id)[0]
    store.switch_branch(first_answer.id)
    switched = store.export_markdown(cid)
    assert "11" in switched.splitlines() and "13, using a tool" not in switched
    assert "small primes: 11, 13" in switched


def test_markdown_includes_reasoning_when_present(store: Store) -> None:
    cid = store.create_conversation("T")
    store.add_message(cid, "user", "q")
    store.add_message(cid, "assistant", "a", reasoning="because")
    text = store.export_markdown(cid)
    assert "<details><summary>Reasoning</summary>\n\nbecause\n\n</details>" in text


@pytest.mark.parametrize(
    "payload",
    [
        "not json at all",
        "[]",
        json.dumps({"format": "something-else"}),
        json.dumps({"format": "llmdeck.conversation", "version": 99}),
        json.dumps({"format": "llmdeck.conversation", "version": 1, "conversation": {"id": "x"}}),
        json.dumps({"format": "llmdeck.conversation", "version": 1, "conversation": {"id": "x"},
                    "messages": [{"id": "m", "role": "wizard"}]}),
        json.dumps({"format": "llmdeck.conversation", "version": 1, "conversation": {"id": "x"},
                    "messages": [{"id": "m", "role": "user", "parent_id": "later"}]}),
        json.dumps({"format": "llmdeck.conversation", "version": 1, "conversation": {"id": "x"},
                    "messages": [{"id": "m", "role": "user"}, {"id": "m", "role": "user"}]}),
        "[" * 100_000 + "]" * 100_000,  # raised RecursionError out of the import
    ],
)
def test_bad_import_files_are_refused_and_change_nothing(store: Store, payload: str) -> None:
    with pytest.raises(StoreError) as info:
        store.import_json(payload)
    assert info.value.code == "BAD_IMPORT"
    assert "nothing was imported" in info.value.message
    assert store.list_conversations() == []


def test_exporting_a_deleted_conversation_says_so(store: Store) -> None:
    cid = store.create_conversation()
    store.delete_conversation(cid)
    for export in (store.export_json, store.export_markdown):
        with pytest.raises(StoreError) as info:
            export(cid)
        assert info.value.code == "NOT_FOUND"
