"""MCP servers through the tool kit and the tool loop, against real SDK servers: the
fixture server over stdio (one process shared by the module, restarted by the crash test
as a user's would be) and over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytest_asyncio

from core.config import McpServerConfig
from core.events import ToolCall
from core.tools import ToolKit, ToolRunner
from core.tools.loop import CANCELLED
from core.tools.mcp import McpConnection, McpServers, schema_problem
from core.tools.registry import ToolContext, ToolRegistry
from core.vision import load_stored
from tests.fixtures.tools import ApproverRecording

pytestmark = pytest.mark.asyncio(loop_scope="module")
FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")
HERMES = {"family": "hermes"}


def stdio_config(name: str = "fixture", **kw) -> McpServerConfig:
    return McpServerConfig(name, command=sys.executable, args=[FIXTURE], **kw)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kit():
    kit = ToolKit()
    kit.mcp.sync([stdio_config(timeout_s=20, env={"FIXTURE_TOKEN": "s3cret"})])
    await kit.prepare(HERMES)
    await kit.mcp.ensure_started()  # a turn waits 8 s at most; a busy machine can take longer
    yield kit
    await kit.close()


@pytest.fixture(scope="module")
def http_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, FIXTURE, "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "HTTP fixture did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(id=f"c-{name}-{time.monotonic_ns()}", name=name, arguments=arguments)


async def run(kit: ToolKit, tool_call: ToolCall, *answers: str, conversation: str = "chat"):
    approver = ApproverRecording(*answers)
    runner = ToolRunner(kit.registry, kit.policy, ToolContext(conversation), approver)
    return [s async for s in runner.run([tool_call])], approver


async def test_tools_join_the_registry_as_server_dot_tool_with_status(kit) -> None:
    names = [n for n in kit.registry.names() if n.startswith("fixture.")]
    assert sorted(names) == ["fixture." + t for t in
                             sorted(["echo", "add", "tally", "whoami", "crash", "hang", "garbage", "picture"])]
    schemas = {s["function"]["name"]: s["function"] for s in kit.offer(HERMES)}
    assert schemas["fixture.add"]["parameters"]["required"] == ["a", "b"]
    assert "python" in schemas, "the built-ins stay"
    row = next(r for r in kit.mcp.status() if r.worker_id == "mcp:fixture")
    assert (row.state, row.engine, row.model) == ("ready", "mcp", "mcp fixture · 8 tools")
    assert row.pid is not None and os.path.exists(f"/proc/{row.pid}") and row.rss_bytes > 0
    assert kit.mcp.prompt_commands() == {"/fixture.review": "TOPIC Ask for a review of a topic."}
    assert kit.mcp.resources() == [("fixture", "notes://today", "today")]


async def test_an_approved_call_runs_and_its_text_comes_back(kit) -> None:
    statuses, approver = await run(kit, call("fixture.echo", text="hello"), "allow")
    assert [s.state for s in statuses] == ["awaiting-approval", "running", "done"]
    assert statuses[-1].result == "echo: hello" and approver.asked == ["fixture.echo"]
    who = await kit.registry.call("fixture.whoami", {}, ToolContext("x"))
    assert json.loads(who.text)["env"] == "s3cret", "the configured env reaches the server"


async def test_a_denied_call_never_reaches_the_server(kit) -> None:
    statuses, _ = await run(kit, call("fixture.tally"), "deny", conversation="deny-chat")
    assert [s.state for s in statuses][-1] == "denied"
    before = (await kit.registry.call("fixture.tally", {}, ToolContext("x"))).text
    statuses, _ = await run(kit, call("fixture.tally"), "allow", conversation="deny-chat")
    assert int(statuses[-1].result) == int(before) + 1, "the denied call did not count"


async def test_always_for_an_mcp_tool_stops_asking_in_that_chat_only(kit) -> None:
    _, first = await run(kit, call("fixture.echo", text="a"), "always", conversation="always")
    statuses, second = await run(kit, call("fixture.echo", text="b"), conversation="always")
    assert first.asked == ["fixture.echo"] and second.asked == []
    assert statuses[-1].state == "done"
    _, other = await run(kit, call("fixture.echo", text="c"), "allow", conversation="another")
    assert other.asked == ["fixture.echo"]


async def test_arguments_are_checked_against_the_schema_before_the_call(kit) -> None:
    statuses, _ = await run(kit, call("fixture.add", a=1), "allow")
    assert statuses[-1].state == "failed" and "needs the argument 'b'" in statuses[-1].result
    statuses, _ = await run(kit, call("fixture.add", a=2, b=3), "allow")
    assert statuses[-1].result == "5"
    nested = {"type": "object", "properties": {"where": {"type": "object", "properties": {
        "line": {"type": "integer", "minimum": 1}}}}}
    assert "where/line" in schema_problem("srv.t", nested, {"where": {"line": 0}})
    assert schema_problem("srv.t", nested, {"where": {"line": 3}}) is None


async def test_an_image_result_is_stored_like_an_attached_image_and_a_broken_one_fails(kit) -> None:
    result = await kit.registry.call("fixture.picture", {}, ToolContext("x"))
    assert result.ok and len(result.figures) == 1
    stored = load_stored(result.figures[0])  # core.vision's stored copy, sidecar included
    assert stored is not None and (stored.name, stored.width, stored.height) == ("fixture.picture.png", 1, 1)
    assert Path(stored.path).read_bytes().startswith(b"\x89PNG")
    assert result.text == "[image fixture.picture.png, 1×1, attached to the chat]"
    broken = await kit.registry.call("fixture.picture", {"broken": True}, ToolContext("x"))
    assert not broken.ok and broken.figures == ()
    assert broken.text.startswith("fixture.picture returned an image (image/png) that could not be "
                                  "shown: fixture.picture.png could not be read as PNG")


async def test_a_malformed_result_fails_the_call_not_the_session(kit) -> None:
    statuses, _ = await run(kit, call("fixture.garbage"), "allow")
    assert statuses[-1].state == "failed"
    assert "answered the call to fixture.garbage with a malformed result" in statuses[-1].result
    assert (await kit.registry.call("fixture.echo", {"text": "ok"}, ToolContext("x"))).text == "echo: ok"


async def test_a_hanging_call_is_cancelled_and_the_server_goes_on(kit) -> None:
    runner = ToolRunner(kit.registry, kit.policy, ToolContext("hang"), ApproverRecording("allow"))
    seen = []
    async for status in runner.run([call("fixture.hang")]):
        seen.append(status)
        if status.state == "running":
            runner.cancel()  # what Esc does
    assert seen[-1].state == "failed" and seen[-1].result == CANCELLED
    assert kit.mcp.connections["fixture"].active == 0
    assert (await kit.registry.call("fixture.echo", {"text": "on"}, ToolContext("x"))).text == "echo: on"


async def test_a_hanging_call_times_out_with_a_clear_message(kit) -> None:
    conn = kit.mcp.connections["fixture"]
    conn.config.timeout_s = 0.5
    try:
        result = await kit.registry.call("fixture.hang", {}, ToolContext("x"))
    finally:
        conn.config.timeout_s = 20
    assert not result.ok
    assert result.text == ("The call to fixture.hang got no answer from MCP server fixture within "
                           "0.5 s (its timeout_s); the call was abandoned.")


async def test_a_crash_mid_call_fails_that_call_and_the_next_call_restarts_it(kit) -> None:
    old_pid = kit.mcp.connections["fixture"].pid
    statuses, _ = await run(kit, call("fixture.crash"), "allow")
    assert statuses[-1].state == "failed"
    assert "MCP server fixture stopped during the call to fixture.crash" in statuses[-1].result
    row = next(r for r in kit.mcp.status() if r.worker_id == "mcp:fixture")
    assert row.state == "crashed" and row.error == "the server stopped during a call"
    assert "fixture.echo" in kit.registry.names(), "kept: the next call restarts the server"
    assert (await kit.registry.call("fixture.echo", {"text": "back"}, ToolContext("x"))).text == "echo: back"
    conn = kit.mcp.connections["fixture"]
    assert conn.restarts == 1 and conn.pid not in (None, old_pid)


async def test_prompts_and_resources(kit) -> None:
    text = await kit.mcp.get_prompt("/fixture.review", "the roof")
    assert text == "Please review the roof carefully and list three risks."
    with pytest.raises(Exception, match="needs topic"):
        await kit.mcp.get_prompt("/fixture.review", "")
    path = await kit.mcp.save_resource("fixture", "notes://today")
    assert path.name == "today.txt" and "plumber" in path.read_text()


async def test_streamable_http_server(http_url) -> None:
    servers = McpServers(ToolRegistry(), [McpServerConfig("web", url=http_url,
                                                          headers={"X-Test": "1"})])
    try:
        await servers.ensure_started()
        assert "web.echo" in servers.registry.names()
        result = await servers.registry.call("web.add", {"a": 20, "b": 22}, ToolContext("x"))
        assert result.ok and result.text == "42"
        who = await servers.registry.call("web.whoami", {}, ToolContext("x"))
        assert json.loads(who.text)["header"] == "1", "the configured headers reach the server"
        row = servers.status()[0]
        assert (row.state, row.pid, row.model) == ("ready", None, "mcp web · 8 tools")
    finally:
        await servers.close()


async def test_servers_that_cannot_start_say_why() -> None:
    servers = McpServers(ToolRegistry(), [
        McpServerConfig("missing", command="/nonexistent/mcp-server"),
        McpServerConfig("quits", command=sys.executable,
                        args=["-c", "import sys; print('no token set', file=sys.stderr); sys.exit(2)"]),
        McpServerConfig("nobody", url="http://127.0.0.1:9/mcp"),
    ])
    try:
        await servers.ensure_started()
        errors = {r.worker_id: (r.state, r.error) for r in servers.status()}
        assert errors["mcp:missing"] == ("failed", "command '/nonexistent/mcp-server' not found; "
                                         "check the path or install it")
        assert errors["mcp:quits"] == ("failed", "exited during start-up (its last words: no token set)")
        assert errors["mcp:nobody"][0] == "failed"
        assert "cannot connect to http://127.0.0.1:9/mcp" in errors["mcp:nobody"][1]
        assert servers.registry.names() == []
        result = await servers.registry.call("missing.x", {}, ToolContext("x"))
        assert not result.ok and "no tool named 'missing.x'" in result.text
    finally:
        await servers.close()


async def test_settings_changes_stop_and_drop_a_server() -> None:
    servers = McpServers(ToolRegistry(), [stdio_config("own")])
    await servers.ensure_started()
    pid = servers.connections["own"].pid
    servers.sync([stdio_config("own", enabled=False)])
    assert servers.registry.names() == [] and servers.status() == []
    await servers.close()  # waits for the background stop too
    assert not os.path.exists(f"/proc/{pid}")


def our_children(marker: str) -> list[int]:
    """Live children whose command line holds `marker`. A zombie (another test's worker
    killed and not yet reaped by multiprocessing) has no command line to read: skipped."""
    import psutil

    found = []
    for c in psutil.Process().children(recursive=True):
        try:
            if marker in " ".join(c.cmdline()):
                found.append(c.pid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


async def test_a_server_that_never_answers_fails_at_its_start_limit_and_is_stopped() -> None:
    mute = McpServerConfig("mute", command=sys.executable, args=["-c", "import sys; sys.stdin.read()  # mute61"])
    conn = McpConnection(mute)
    assert not await conn.ensure_started(timeout=0.5)
    assert (conn.state, conn.error) == ("failed", "did not finish starting within 0.5 s")
    await conn.close()
    assert our_children("mute61") == []


async def test_a_turn_does_not_wait_long_for_a_slow_server() -> None:
    slow = McpServerConfig("slow", command=sys.executable, args=["-c", "import sys; sys.stdin.read()  # mute62"])
    servers = McpServers(ToolRegistry(), [slow])
    started = time.monotonic()
    await servers.ensure_started(wait=0.3)
    assert time.monotonic() - started < 2
    assert servers.status()[0].state == "starting" and servers.registry.names() == []
    await servers.close()
    assert our_children("mute62") == []


async def test_a_killed_app_leaves_no_server_behind() -> None:
    """kill -9 of the app: the server sees its stdin close and exits by itself."""
    import psutil

    root = str(Path(__file__).resolve().parents[2])
    script = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {root!r})\n"
        "from core.config import McpServerConfig\n"
        "from core.tools.mcp import McpServers\n"
        "from core.tools.registry import ToolRegistry\n"
        "async def main():\n"
        f"    s = McpServers(ToolRegistry(), [McpServerConfig('own', command=sys.executable, args=[{FIXTURE!r}])])\n"
        "    await s.ensure_started()\n"
        "    print(s.connections['own'].pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n")
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(app.stdout.readline())
    assert psutil.pid_exists(pid)
    app.kill()
    app.wait(10)
    deadline = time.monotonic() + 15
    def running() -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    while running():
        assert time.monotonic() < deadline, "the MCP server outlived the killed app"
        time.sleep(0.05)
