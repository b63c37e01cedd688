"""MCP from the composer: `/server.prompt ARGS` puts a server's prompt in the composer to
edit and send, `/attach mcp:SERVER:URI` attaches a server's resource like a file.

The main screen only forwards here; servers start in the background the moment a `/` is
typed, so their prompts are listed by the time the name is.
"""

from __future__ import annotations

import shlex
from typing import Any

from tui import slash
from tui.widgets.attachments import attach_from_composer

RESOURCE_PREFIX = "mcp:"


def install(screen: Any) -> None:
    """Let the slash commands include the prompts of the screen's MCP servers."""
    slash.set_extra_commands(screen.runtime.mcp_prompt_commands)


def composer_changed(screen: Any, text: str) -> str:
    """Start servers on the first `/`; the hint for `/attach mcp:` ("" when none)."""
    if text.startswith("/"):
        started = screen.runtime.mcp_start_soon()
        if started is not None:  # show the prompts in the hint once they are listed
            started.add_done_callback(lambda _: _refresh_hint(screen))
    if not text.startswith(f"/attach {RESOURCE_PREFIX}"):
        return ""
    typed = text.removeprefix("/attach ")
    names = [f"{RESOURCE_PREFIX}{server}:{uri}" for server, uri, _ in screen.runtime.mcp_resources()]
    shown = [n for n in names if n.startswith(typed)][:6]
    return "  ".join(shown) if shown else "No MCP resource matches (servers list theirs once started)."


def _refresh_hint(screen: Any) -> None:
    from textual.widgets import TextArea

    composer = screen.composer if screen.is_attached else None
    if composer is not None and composer.text.startswith("/"):
        composer.post_message(TextArea.Changed(composer))


async def run_prompt(screen: Any, name: str, argument: str) -> None:
    """`/server.prompt ARGS`: the prompt's text goes into the composer, not straight out."""
    from core.wire.tools import McpCallError  # the tools package: not before the first frame

    try:
        text = await screen.runtime.mcp_prompt(name, argument)
    except McpCallError as exc:
        screen.notify(str(exc), title="MCP prompt", severity="error", timeout=8)
        screen.composer.restore(f"{name} {argument}".rstrip())
        return
    screen.composer.load_text(text)
    screen.composer.focus()
    screen.notify(f"{name}: edit it, then Enter sends it.", timeout=4)


async def attach_resource(screen: Any, argument: str) -> None:
    """`/attach mcp:SERVER:URI`: read the resource into a file and attach that file."""
    server, _, uri = argument.strip().removeprefix(RESOURCE_PREFIX).partition(":")
    if not server or not uri:
        screen.notify("Usage: /attach mcp:SERVER:URI (e.g. mcp:notes:notes://today).",
                      severity="warning", timeout=6)
        return
    from core.wire.tools import McpCallError  # the tools package: not before the first frame

    try:
        path = await screen.runtime.mcp_save_resource(server, uri)
    except McpCallError as exc:
        screen.notify(str(exc), title="MCP resource", severity="error", timeout=8)
        screen.composer.restore(f"/attach {argument}")
        return
    await attach_from_composer(screen, shlex.quote(str(path)))
