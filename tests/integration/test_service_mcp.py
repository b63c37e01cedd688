"""`llmdeck mcp` asks the engine service when one runs: an agent finds a conversation the
service just stored, through the service (its log names the mcp client)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from core.config import Settings
from core.events import TextDelta
from core.service import RemoteRuntime, connect
from tests.helpers import service_proc as svc


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def test_mcp_reads_the_history_through_the_service(llmdeck_home: Path) -> None:
    Settings(mcp_share_conversations=True).save()
    svc.start(*svc.scripted_args(reply="Run citric acid through it."))
    rt = RemoteRuntime(await connect("tui"))
    try:
        turn = await rt.start_turn(None, "How do I descale the espresso machine?")
        assert [e async for e in turn.events() if isinstance(e, TextDelta)]
    finally:
        await rt.close()
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tui.cli", "mcp"], cwd=str(svc.ROOT),
        env={"LLMDECK_HOME": os.environ["LLMDECK_HOME"], "PYTHONPATH": str(svc.ROOT)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        found = (await session.call_tool("search_conversations",
                                         {"query": "espresso"})).content[0].text
        assert found.startswith("1 conversation(s) match 'espresso':")
        assert f"[{turn.conversation_id}]" in found
        text = (await session.call_tool("read_conversation",
                                        {"conversation_id": turn.conversation_id})).content[0].text
        assert "assistant: Run citric acid through it." in text
    log = (llmdeck_home / "logs" / "service.log").read_text()
    assert "(mcp, pid" in log, "the mcp server asked the service"
