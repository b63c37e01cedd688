"""`llmdeck mcp` driven by the SDK's own client over stdio, as another agent would run it:
it offers only what the settings turned on, finds stored conversations and documents,
and cannot write to the database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from core import paths
from core.config import Settings
from core.store import Store
from core.tools.mcp.share import ReadOnlyHistory
from tests.fixtures.tui import seed_conversations

ROOT = Path(__file__).resolve().parents[2]


def seed() -> str:
    ids = seed_conversations([("How do I descale the espresso machine?",
                               "Run citric acid through it, then two tanks of water."),
                              ("Plan a trip to Lisbon", "Start at Alfama.")])
    with Store.open(paths.db_path()) as store:
        store.add_attachment(ids[1], "itinerary.pdf", "/tmp/itinerary.pdf",
                             text="Day 1: tram 28 to the castle. Day 2: Belém pastries.")
    return ids[0]


def params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "tui.cli", "mcp"], cwd=str(ROOT),
                                 env={"LLMDECK_HOME": os.environ["LLMDECK_HOME"], "PYTHONPATH": str(ROOT)})


async def test_an_agent_searches_conversations_and_documents_read_only() -> None:
    espresso = seed()
    Settings(mcp_share_conversations=True, mcp_share_documents=True).save()
    async with stdio_client(params()) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert sorted(tools) == ["read_conversation", "search_conversations", "search_documents"]
        assert all(t.annotations.read_only_hint for t in tools.values())
        found = (await session.call_tool("search_conversations", {"query": "espresso"})).content[0].text
        assert found.startswith("1 conversation(s) match 'espresso':")
        assert f"[{espresso}]" in found and "**espresso**" in found.lower()
        read = (await session.call_tool("read_conversation", {"conversation_id": espresso})).content[0].text
        assert "assistant: Run citric acid through it" in read
        docs = (await session.call_tool("search_documents", {"query": "tram castle"})).content[0].text
        assert "itinerary.pdf (in “Plan a trip to Lisbon”)" in docs and "tram 28" in docs
        none = (await session.call_tool("search_documents", {"query": "volcano"})).content[0].text
        assert none == "No stored document contains 'volcano'."


async def test_only_what_was_turned_on_is_offered() -> None:
    seed()
    Settings(mcp_share_conversations=True).save()
    async with stdio_client(params()) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = sorted(t.name for t in (await session.list_tools()).tools)
    assert names == ["read_conversation", "search_conversations"]


def test_nothing_turned_on_refuses_to_start_with_the_way_to_turn_it_on() -> None:
    done = subprocess.run([sys.executable, "-m", "tui.cli", "mcp"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert "llmdeck mcp offers nothing yet" in done.stderr and "mcp_share_conversations = true" in done.stderr


def test_the_database_is_opened_read_only_and_never_created() -> None:
    history = ReadOnlyHistory()
    with pytest.raises(LookupError, match="No conversations are stored yet"):
        history.store()
    assert not paths.db_path().exists()
    seed()
    store = ReadOnlyHistory().store()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        store.conn.execute("DELETE FROM messages")
