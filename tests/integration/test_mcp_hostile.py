"""Hostile MCP servers, attacked through the real doors: the fixture server
(tests/fixtures/mcp_server.py, a real stdio process) with its hostile modes on, reached
through McpServers and the tool registry as a turn reaches them. Each effect is checked
from outside: files on disk, this process's memory (psutil), time, the sentence a person
reads, and the server still answering after."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import pytest_asyncio

from core import paths
from core.config import McpServerConfig
from core.tools.mcp import McpCallError, McpServers
from core.tools.mcp.connection import MAX_TOOLS
from core.tools.mcp.server_log import LOG_FILES, MAX_LOG_BYTES, log_path
from core.tools.registry import ToolContext, ToolRegistry
from core.workers.status_file import format_table

pytestmark = pytest.mark.asyncio(loop_scope="module")
FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")


def hostile(name: str, *modes: str, timeout_s: float = 60) -> McpServerConfig:
    args = [FIXTURE]
    for mode in modes:
        args += ["--mode", mode]
    return McpServerConfig(name, command=sys.executable, args=args, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-hostile-home")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(module_home: Path):
    """One McpServers with a server per hostile mode, in a home of the module's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMDECK_HOME", str(module_home))
        servers = McpServers(ToolRegistry(), [
            hostile("loud", "floods"), hostile("crowd", "many-tools"),
            hostile("evil", "evil-names", "evil-resource")])
        try:
            await servers.ensure_started()
            yield servers
        finally:
            await servers.close()


@pytest.fixture(autouse=True)
def same_home(llmdeck_home: Path, module_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's servers write to the module's home (logs, resources): tests look there."""
    monkeypatch.setenv("LLMDECK_HOME", str(module_home))


@contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """This process's RSS growth while the block runs, sampled every 10 ms, in MiB."""
    me = psutil.Process()
    seen = {"before": me.memory_info().rss / 2**20, "peak": 0.0}
    seen["peak"] = seen["before"]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen["peak"] = max(seen["peak"], me.memory_info().rss / 2**20)
            done.wait(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()
        seen["grown"] = seen["peak"] - seen["before"]


async def call(servers: McpServers, tool: str, **arguments):  # noqa: ANN201
    return await servers.registry.call(tool, arguments, ToolContext("hostile"))


async def test_a_stderr_flood_is_capped_and_rotated(servers: McpServers) -> None:
    started = time.monotonic()
    result = await call(servers, "loud.shout", megabytes=40)
    assert result.ok and result.text == "shouted", result.text
    await asyncio.sleep(0.5)  # the last of it reaches the log
    logs = sorted(log_path("loud").parent.glob("mcp-loud.log*"))
    sizes = {p.name: p.stat().st_size for p in logs}
    assert set(sizes) <= {"mcp-loud.log", *(f"mcp-loud.log.{n}" for n in range(1, LOG_FILES))}, sizes
    assert "mcp-loud.log.1" in sizes, "it rotated"
    assert all(size <= MAX_LOG_BYTES for size in sizes.values()), sizes
    assert sum(sizes.values()) <= LOG_FILES * MAX_LOG_BYTES
    print(f"40 MiB on stderr: logs {sizes}, {time.monotonic() - started:.1f} s")


async def test_a_flood_on_stdout_is_dropped_and_the_call_answers(servers: McpServers) -> None:
    with peak_rss() as rss:
        result = await call(servers, "loud.babble", megabytes=20)
    assert result.ok and result.text == "babbled"
    assert rss["grown"] < 100, rss
    assert "line(s) on stdout that are not JSON-RPC were dropped" in log_path("loud").read_text(errors="replace") \
        or "not JSON-RPC" in Path(f"{log_path('loud')}.1").read_text(errors="replace")
    assert (await call(servers, "loud.echo", text="still here")).text == "echo: still here"


async def test_a_200_mb_tool_result_fails_the_call_with_memory_bounded(servers: McpServers) -> None:
    started = time.monotonic()
    with peak_rss() as rss:
        result = await call(servers, "loud.huge", megabytes=200)
    took = time.monotonic() - started
    print(f"200 MB tool result: refused in {took:.1f} s, this process +{rss['grown']:.0f} MiB RSS")
    assert not result.ok
    assert result.text == ("MCP server loud answered the call to loud.huge with more than 32 MiB; "
                           "the answer was dropped unread and the call failed.")
    assert rss["grown"] < 200, rss
    assert took < 60
    assert (await call(servers, "loud.echo", text="after")).text == "echo: after"
    assert servers.connections["loud"].state == "ready"


async def test_a_huge_prompt_is_refused_not_put_in_the_composer(servers: McpServers) -> None:
    with pytest.raises(McpCallError, match=r"/loud\.big returned 2,097,152 characters, more than the 100,000"):
        await servers.get_prompt("/loud.big", "2")


async def test_ten_thousand_tools_are_capped_with_a_note(servers: McpServers) -> None:
    mine = [n for n in servers.registry.names() if n.startswith("crowd.")]
    assert len(mine) == MAX_TOOLS
    assert "crowd.echo" in mine, "the server's own tools come first"
    row = next(r for r in servers.status() if r.worker_id == "mcp:crowd")
    assert row.state == "ready" and f"only the first {MAX_TOOLS} were taken" in (row.error or "")


async def test_tool_names_with_escapes_or_separators_are_refused(servers: McpServers) -> None:
    names = servers.registry.names()
    evil = [n for n in names if n.startswith("evil.")]
    assert "evil.echo" in evil
    assert not [n for n in evil if "/" in n or "\x1b" in n or ".." in n or len(n) > 80], evil
    row = next(r for r in servers.status() if r.worker_id == "mcp:evil")
    assert row.error is not None and "refused 4 tool(s)" in row.error
    assert "\x1b" not in row.error and "␛]52" in row.error, "the note shows the escape, never sends it"
    assert "\x1b" not in format_table(servers.status())


async def test_a_resource_uri_that_climbs_out_is_refused(servers: McpServers) -> None:
    outside = [uri for server, uri, _ in servers.resources() if server == "evil" and "today/" in uri]
    assert len(outside) == 2, servers.resources()
    for uri in outside:
        with pytest.raises(McpCallError, match=r"climbs out of its folder with '\.\.'"):
            await servers.save_resource("evil", uri)
    home = Path(os.environ["LLMDECK_HOME"])
    written = [p for p in home.rglob("*") if "outside" in p.name or "encoded" in p.name]
    assert written == [] and not (paths.data_dir() / "mcp" / "resources" / "evil").exists() \
        or not any((paths.data_dir() / "mcp" / "resources" / "evil").iterdir())
    assert (await servers.save_resource("evil", "notes://today")).name == "today.txt"


async def test_a_hang_at_initialize_fails_at_the_start_limit_and_shows_in_the_pane() -> None:
    servers = McpServers(ToolRegistry(), [hostile("stuck", "hang-init")], start_timeout_s=1.5)
    started = time.monotonic()
    try:
        await servers.ensure_started()
        assert time.monotonic() - started < 8
        [row] = servers.status()  # what the F4 pane and `llmdeck workers` draw
        assert (row.state, row.error) == ("failed", "did not finish starting within 1.5 s")
        assert "stuck" not in " ".join(servers.registry.names())
        result = await servers.registry.call("stuck.echo", {}, ToolContext("x"))
        assert not result.ok
    finally:
        await servers.close()
    marker = "hang-init"
    left = [c for c in psutil.Process().children(recursive=True) if marker in " ".join(c.cmdline())]
    assert left == [], "the stuck server was stopped"


async def test_death_mid_call_ends_the_call_and_the_server_restarts(servers: McpServers) -> None:
    conn = servers.connections["loud"]
    old_pid, restarts = conn.pid, conn.restarts
    result = await call(servers, "loud.crash")
    assert not result.ok and "MCP server loud stopped during the call to loud.crash" in result.text
    assert (await call(servers, "loud.echo", text="back")).text == "echo: back"
    assert conn.restarts == restarts + 1 and conn.pid not in (None, old_pid)


def start_http(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """The fixture server over streamable HTTP on a free loopback port, floods on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, FIXTURE, "--http", str(port), "--mode", "floods", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "HTTP fixture did not start"
            time.sleep(0.1)


@pytest.mark.parametrize("answers", ["json", "events"])
async def test_a_huge_answer_over_http_fails_the_call_with_memory_bounded(answers: str) -> None:
    proc, url = await asyncio.to_thread(start_http, *(["--json-response"] if answers == "json" else []))
    servers = McpServers(ToolRegistry(), [McpServerConfig("web", url=url, timeout_s=60)])
    try:
        await servers.ensure_started()
        assert (await call(servers, "web.echo", text="hi")).text == "echo: hi"
        started = time.monotonic()
        with peak_rss() as rss:
            result = await call(servers, "web.huge", megabytes=64)
        took = time.monotonic() - started
        print(f"64 MB answer over HTTP ({answers}): refused in {took:.1f} s, +{rss['grown']:.0f} MiB RSS")
        assert not result.ok and "with more than 32 MiB; the answer was dropped unread" in result.text, result.text
        assert rss["grown"] < 200, rss
        small = await call(servers, "web.huge", megabytes=2)  # over the SDK's 1 MiB event size
        assert small.ok and len(small.text) > 19_000, small.text[:200]
        assert (await call(servers, "web.echo", text="after")).text == "echo: after"
    finally:
        await servers.close()
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
