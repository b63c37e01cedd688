"""MCP start does its heavy work off the event loop (issue 44 item 4, issue 48 item 14):
a real stdio server listing 10,000 tools has its listing parsed in a worker thread and
cut to MAX_LISTED entries before the SDK's session sees it, and the SDK's first import
(a second of a busy machine's loop) happens in a worker thread, also for a server that
never answers `initialize`. Checked by the thread each piece of work ran on, not by a
timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.config import McpServerConfig
from core.tools.mcp import McpServers
from core.tools.mcp import stdio as mcp_stdio
from core.tools.mcp.connection import MAX_TOOLS
from core.tools.registry import ToolRegistry

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(ROOT / "tests" / "fixtures" / "mcp_server.py")


def _server(name: str, mode: str) -> McpServerConfig:
    return McpServerConfig(name, command=sys.executable, args=[FIXTURE, "--mode", mode])


async def test_a_listing_of_ten_thousand_tools_is_parsed_off_the_loop_and_cut(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    big_parses: list[tuple[bool, int]] = []  # (on the loop's thread, tools passed on)
    real = mcp_stdio._message  # noqa: SLF001

    def watched(line: bytes, *rest: object) -> object:
        message = real(line, *rest)  # type: ignore[arg-type]
        if len(line) > 100_000:
            result = getattr(getattr(message, "message", None), "result", None) or {}
            big_parses.append((threading.get_ident() == loop_thread, len(result.get("tools", []))))
        return message

    monkeypatch.setattr(mcp_stdio, "_message", watched)
    servers = McpServers(ToolRegistry(), [_server("crowd", "many-tools")])
    try:
        await servers.ensure_started()
        assert big_parses, "the listing came as one big line"
        assert all(not on_loop for on_loop, _ in big_parses), "parsed on the event loop"
        assert all(n <= mcp_stdio.MAX_LISTED for _, n in big_parses), big_parses
        mine = [n for n in servers.registry.names() if n.startswith("crowd.")]
        assert len(mine) == MAX_TOOLS and "crowd.echo" in mine
        [row] = servers.status()
        assert f"only the first {MAX_TOOLS} were taken" in (row.error or "")
    finally:
        await servers.close()


PROBE = """
import asyncio, json, sys, threading
importers = {}

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("mcp", "anyio") and name not in importers:
            importers[name] = threading.current_thread().name
        return None

sys.meta_path.insert(0, Watch())
from core.config import McpServerConfig
from core.tools.mcp import McpServers
from core.tools.registry import ToolRegistry

async def main():
    servers = McpServers(ToolRegistry(), [McpServerConfig("stuck", command=sys.executable,
                         args=[sys.argv[1], "--mode", "hang-init"])], start_timeout_s=1.0)
    await servers.ensure_started()
    [row] = servers.status()
    await servers.close()
    print(json.dumps({"importers": importers, "state": row.state, "error": row.error}))

asyncio.run(main())
"""


def test_the_sdk_is_imported_off_the_loop_for_a_server_that_never_answers(llmdeck_home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, FIXTURE], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["state"] == "failed" and "within 1 s" in seen["error"]
    assert seen["importers"].get("mcp") not in (None, "MainThread"), seen
    assert seen["importers"].get("anyio") not in (None, "MainThread"), seen


@pytest.mark.parametrize("answers", ["json", "events"])
async def test_a_listing_over_http_is_cut_in_a_thread_before_the_sdk_parses_it(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch, answers: str) -> None:
    import asyncio

    from core.tools.mcp import http_limits
    from tests.integration.test_mcp_hostile import start_http

    loop_thread = threading.get_ident()
    trims: list[tuple[bool, int, int]] = []  # (on the loop's thread, bytes in, bytes out)
    real = http_limits._trim_listing  # noqa: SLF001

    def watched(body: bytes, key: str) -> bytes:
        out = real(body, key)
        trims.append((threading.get_ident() == loop_thread, len(body), len(out)))
        return out

    monkeypatch.setattr(http_limits, "_trim_listing", watched)
    proc, url = await asyncio.to_thread(start_http, "--mode", "many-tools",
                                        *(["--json-response"] if answers == "json" else []))
    servers = McpServers(ToolRegistry(), [McpServerConfig("web", url=url)])
    try:
        await servers.ensure_started()
        mine = [n for n in servers.registry.names() if n.startswith("web.")]
        assert len(mine) == MAX_TOOLS and "web.echo" in mine
        big = [t for t in trims if t[1] > 100_000]
        assert big and all(not on_loop and after < before / 10 for on_loop, before, after in big), trims
    finally:
        await servers.close()
        proc.kill()
        proc.wait()
