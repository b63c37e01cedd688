"""The composer's slash commands and its hint line, carried out for the chat screen.

Moved out of tui/screens/main.py (which is kept under 700 lines): `run_slash` does what a
/command asks (/clear, /export, /model, /system, /attach, MCP prompts); `composer_changed`
keeps the hint line under the chat (completions, an MCP prompt's arguments, paths to
attach) and the attachment bar's @doc(...) check in step with what is typed.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from tui import mcp_commands, slash
from tui.widgets.attachments import AttachmentBar, attach_hint, start_attach


async def run_slash(screen: Any, command: slash.SlashCommand) -> None:
    """Carry out `command` on the chat screen (tui.screens.main.MainScreen)."""
    name, arg = command.name, command.argument
    if name == "/clear":
        await screen.action_new_chat()
    elif name == "/export":
        screen.action_export()
    elif name == "/model":
        if arg:
            screen.app.use_model_named(arg)
        else:
            screen.action_pick_model()
    elif name == "/system":
        screen.runtime.settings.system_prompt = arg
        await screen.app.save_settings_or_warn()
        screen.notify("System prompt cleared." if not arg else "System prompt set (saved).",
                      timeout=3)
    elif name == "/attach" and arg.startswith(mcp_commands.RESOURCE_PREFIX):
        await mcp_commands.attach_resource(screen, arg)
    elif name == "/attach":
        start_attach(screen, arg)  # a worker: Esc cancels a file being read
    elif slash.is_extra(name):
        await mcp_commands.run_prompt(screen, name, arg)


def composer_changed(screen: Any, text: str) -> None:
    """The hint line and the @doc(...) check for the composer's new `text`."""
    hint = screen.query_one("#slash-hint", Static)
    mcp_hint = mcp_commands.composer_changed(screen, text)
    matches = slash.completions(text)
    hint.display = bool(matches)
    if matches:
        hint.update("  ".join(f"{m} {slash.known()[m]}" if len(matches) == 1 else m
                              for m in matches) + "   (tab completes)")
    elif mcp_hint:
        hint.display = True
        hint.update(mcp_hint)
    elif paths := attach_hint(text):
        hint.display = True
        hint.update(paths)
    screen.query_one(AttachmentBar).show_mentions(
        screen.runtime.check_mentions(screen.conversation_id, text))
