"""The face calls the UI makes instead of reaching into the Runtime's parts (issue 30
item 5), answered by tui.service_runtime.ServiceRuntime against a real service process:
sync ones from the client's mirror of the service, async ones over the socket."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from core.config import McpServerConfig, Settings
from core.events import Done
from core.runtime import SandboxInfo
from core.tools import McpCallError
from tests.helpers import service_proc as svc
from tui.service_runtime import ServiceRuntime

FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def _ready(client: ServiceRuntime) -> None:
    for _ in range(300):
        if client.model_state().state == "ready":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the service's model is {client.model_state()}")


async def test_mcp_sandbox_python_and_the_model_calls_cross_the_socket(llmdeck_home: Path) -> None:
    Settings(mcp_servers=[McpServerConfig("fixture", command=sys.executable,
                                          args=[FIXTURE])]).save()
    svc.start(*svc.scripted_args(reply="Noted."))
    client = ServiceRuntime()
    await client.start()
    try:
        await _ready(client)
        seen: list[str] = []
        client.listen_model(lambda state: seen.append(state.state))
        assert not client.model_is_remote()
        info = client.sandbox_info()
        assert isinstance(info, SandboxInfo) and info.processes > 0 and info.max_live > 0

        # MCP: started in the service on a `/`, listed here once it answers.
        assert client.mcp_prompt_commands() == {}
        started = client.mcp_start_soon()
        assert started is not None
        await asyncio.wait_for(started, 60)
        assert client.mcp_start_soon() is None  # listed already
        assert client.mcp_prompt_commands() == {"/fixture.review": "TOPIC Ask for a review of a topic."}
        assert ("fixture", "notes://today") in [(s, u) for s, u, _ in client.mcp_resources()]
        assert "the roof" in await client.mcp_prompt("/fixture.review", "the roof")
        with pytest.raises(McpCallError, match="No MCP prompt /fixture.nope"):
            await client.mcp_prompt("/fixture.nope", "x")
        saved = await client.mcp_save_resource("fixture", "notes://today")
        assert saved.is_file() and llmdeck_home in saved.parents
        with pytest.raises(McpCallError, match="nowhere"):
            await client.mcp_save_resource("nowhere", "notes://today")

        # The sandbox runs the block in the service and the record is stored there.
        turn = await client.start_turn(None, "remember this")
        assert isinstance([e async for e in turn.events()][-1], Done)
        cid = turn.conversation_id
        run = await client.run_python(cid, "print(6 * 7)")
        assert run.result.ok and run.result.stdout == "42\n", run.result
        stored = await client.messages(cid)
        assert stored[-1].id == run.message_id and stored[-1].role == "tool"
        assert "42" in stored[-1].content
        for _ in range(50):  # the mirror follows the service's sandbox (polled)
            if client.sandbox_info().running:
                break
            await asyncio.sleep(0.1)
        assert client.sandbox_info().running

        # The conversation remembers the model; is_active_model answers for real.
        await client.remember_model(cid)
        conversation = await client.conversation(cid)
        assert conversation is not None and conversation.model
        assert client.is_active_model(conversation.model)
        assert not client.is_active_model("/no/such/model.gguf")
    finally:
        await client.close()


async def test_the_approval_dialogs_questions_come_with_the_services_ask(
        llmdeck_home: Path) -> None:
    from tests.fixtures.tools import HERMES_TEMPLATE, hermes_call

    svc.start(*svc.scripted_args(replies=[hermes_call("now", {}), "Checked the clock."],
                                 template=HERMES_TEMPLATE, chunk_chars=7))
    client = ServiceRuntime()
    await client.start()
    try:
        await _ready(client)
        asked: list[tuple[str | None, bool]] = []

        async def allow(call):  # noqa: ANN001, ANN202  - what MainScreen's dialog reads
            asked.append((client.tool_warning(call.name), client.can_always_allow(call.name)))
            return "allow"

        turn = await client.start_turn(None, "what time is it?")
        turn.approve = allow
        assert isinstance([e async for e in turn.events()][-1], Done)
        assert asked == [(None, True)]  # `now` reads only: "always allow" is offered
    finally:
        await client.close()


async def test_f4_says_which_service_the_client_talks_to(llmdeck_home: Path) -> None:
    """Issue 30 item 3: F4 shows the service (pid, uptime, clients, replies, memory)."""
    pid = svc.start(*svc.scripted_args(reply="Noted."))
    client = ServiceRuntime()
    await client.start()
    try:
        line = client.engine_line()
        assert line is not None and line.startswith(f"Engine service pid {pid} · up ")
        assert "· 1 client ·" in line and "0 replies streaming" in line and " MB with its" in line
    finally:
        await client.close()
