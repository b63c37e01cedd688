"""Snapshots of MCP in the app: the settings screen's MCP section with a ready server, one
that cannot start and one turned off, and the card of an MCP tool call reached through
the real tool loop (scripted model, approval by key, the fixture SDK server over stdio)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core.config import McpServerConfig, Settings
from tests.fixtures.tui import scripted_app, wait_until
from tui.widgets.tool_card import ToolCard

SIZE = (100, 36)
HERMES = "{{ '<tool_call>' }}"
FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")
SLOW = 60.0


def _settings() -> Settings:
    return Settings(mcp_servers=[
        # A relative script path so the command line on screen is the same on every machine.
        McpServerConfig("fixture", command=sys.executable, args=[FIXTURE]),
        McpServerConfig("broken", command="/opt/nowhere/mcp-broken"),
        McpServerConfig("web", url="https://mcp.example.org/mcp", enabled=False),
    ])


def test_settings_mcp_section(snap_compare) -> None:
    async def run_before(pilot) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await app.runtime.mcp_start_soon()  # what a typed `/` does: the servers start
        await pilot.press("f3")
        await wait_until(pilot, lambda: app.screen.query("#mcp-on-fixture"))
        screen = app.screen
        screen.query_one("#mcp-section-title").scroll_visible(animate=False, top=True)
        for target in screen.query(".mcp-target"):  # the venv's path differs per machine
            if "mcp_server.py" in str(target.render()):
                target.update("python tests/fixtures/mcp_server.py")
        screen.query_one("#mcp-new-name").focus()
        screen.query_one("#mcp-new-name").cursor_blink = False
        await pilot.pause(0.3)

    app = scripted_app(_settings(), reply="Hi.")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_mcp_tool_card_done(snap_compare) -> None:
    call = json.dumps({"name": "fixture.add", "arguments": {"a": 19, "b": 23}})

    async def run_before(pilot) -> None:
        app = pilot.app
        app.main.composer.cursor_blink = False
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await pilot.press(*"What is 19 + 23?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen.__class__.__name__ == "ToolApprovalScreen", SLOW)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        card = app.main.query_one(ToolCard)
        assert (card.tool_name, card.state, card.result) == ("fixture.add", "done", "42")
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)

    settings = Settings(mcp_servers=[McpServerConfig("fixture", command=sys.executable, args=[FIXTURE])])
    app = scripted_app(settings, replies=[f"Let me add.\n<tool_call>\n{call}\n</tool_call>",
                                          "19 + 23 is 42."], template=HERMES)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
