"""The read-only built-ins against a real SQLite store."""

from __future__ import annotations

import asyncio
from datetime import datetime

from core.store import Store
from core.tools import ToolContext
from core.tools.builtins import default_registry
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def _ctx(store: Store, cid: str) -> ToolContext:
    async def store_call(fn, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    return ToolContext(cid, store=store, store_call=store_call)


async def test_now_returns_an_iso_timestamp() -> None:
    result = await default_registry().call("now", {}, ToolContext("c"))
    assert result.ok
    stamp = datetime.fromisoformat(result.data["iso"])
    assert stamp.tzinfo is not None and stamp.isoformat(timespec="seconds") in result.text


async def test_search_conversations_finds_saved_chats(store: Store) -> None:
    cid = store.create_conversation()
    store.add_message(cid, "user", "How do I braise fennel?")
    other = store.create_conversation()
    store.add_message(other, "user", "unrelated")
    reg = default_registry()
    result = await reg.call("search_conversations", {"query": "fennel"}, _ctx(store, other))
    assert result.ok and "**fennel**" in result.text and result.data["ids"] == [cid]
    none = await reg.call("search_conversations", {"query": "zeppelin"}, _ctx(store, other))
    assert none.ok and "No saved conversation matches" in none.text
    empty = await reg.call("search_conversations", {"query": "  "}, _ctx(store, other))
    assert not empty.ok


async def test_read_document_says_clearly_when_nothing_is_attached(store: Store) -> None:
    cid = store.create_conversation()
    result = await default_registry().call("read_document", {}, _ctx(store, cid))
    assert not result.ok and "No documents are attached" in result.text


async def test_read_document_reads_by_name_in_pages(store: Store) -> None:
    cid = store.create_conversation()
    store.add_attachment(cid, "notes.md", "/tmp/notes.md", text="a" * 50 + "b" * 50)
    store.add_attachment(cid, "plan.txt", "/tmp/plan.txt", text="the plan")
    reg, ctx = default_registry(), _ctx(store, cid)
    which = await reg.call("read_document", {}, ctx)
    assert not which.ok and "notes.md, plan.txt" in which.text
    page = await reg.call("read_document", {"name": "@notes.md", "max_chars": 60}, ctx)
    assert page.ok and "characters 0–60 of 100" in page.text and "offset=60" in page.text
    rest = await reg.call("read_document", {"name": "notes.md", "offset": 60}, ctx)
    assert rest.ok and rest.text.endswith("b" * 40)
    missing = await reg.call("read_document", {"name": "x.pdf"}, ctx)
    assert not missing.ok and "Attached: notes.md, plan.txt" in missing.text
    past = await reg.call("read_document", {"name": "plan.txt", "offset": 99}, ctx)
    assert not past.ok and "past the end" in past.text
