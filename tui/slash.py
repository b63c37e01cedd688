"""Slash commands typed in the composer: what exists, completion, and parsing.

Besides the fixed COMMANDS, the prompts of running MCP servers are commands too
(`/server.prompt`); the main screen hands over where to read them (set_extra_commands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

COMMANDS: dict[str, str] = {
    "/model": "choose the model (optionally: /model NAME)",
    "/system": "set the system prompt: /system TEXT (empty clears it)",
    "/clear": "start a new, empty chat",
    "/export": "write this conversation as Markdown",
    "/attach": "attach a document: /attach PATH",
}


_extra: Callable[[], dict[str, str]] | None = None


def set_extra_commands(provider: Callable[[], dict[str, str]] | None) -> None:
    """Where to read more commands from ({"/server.prompt": description}), read each time."""
    global _extra
    _extra = provider


def known() -> dict[str, str]:
    """Every command now: the fixed ones, then the extra ones (never overriding them)."""
    extra = _extra() if _extra is not None else {}
    return COMMANDS | {k: v for k, v in extra.items() if k not in COMMANDS}


def is_extra(name: str) -> bool:
    return name not in COMMANDS and name in known()


@dataclass(frozen=True)
class SlashCommand:
    name: str
    argument: str


def completions(text: str) -> list[str]:
    """Commands that complete what is typed (only while the first word is being typed)."""
    if not text.startswith("/") or any(ch.isspace() for ch in text):
        return []
    return [c for c in known() if c.lower().startswith(text.lower())]


def complete(text: str) -> str | None:
    """The text after Tab: the single match plus a space, or the longest common prefix."""
    matches = completions(text)
    if not matches:
        return None
    if len(matches) == 1:
        return matches[0] + " "
    prefix = matches[0]
    for m in matches[1:]:
        while not m.startswith(prefix):
            prefix = prefix[:-1]
    return prefix if len(prefix) > len(text) else None


def parse(text: str) -> SlashCommand | None:
    """A known command, or None when the text is an ordinary message (or unknown)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    name, _, argument = stripped.partition(" ")
    commands = known()
    name = name if name in commands else name.lower()
    if name not in commands:
        return None
    return SlashCommand(name, argument.strip())


def unknown_command(text: str) -> str | None:
    """A reason to refuse `/something` that is not a command (text starting with // is sent)."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name = stripped.split()[0]
    commands = known()
    if name in commands or name.lower() in commands:
        return None
    names = " ".join(commands)
    return f"Unknown command {name}. Known: {names}. Start with // to send a message that begins with /."
