"""Slash commands typed in the composer: what exists, completion, and parsing."""

from __future__ import annotations

from dataclasses import dataclass

COMMANDS: dict[str, str] = {
    "/model": "choose the model (optionally: /model NAME)",
    "/system": "set the system prompt: /system TEXT (empty clears it)",
    "/clear": "start a new, empty chat",
    "/export": "write this conversation as Markdown",
    "/attach": "attach a document: /attach PATH",
}


@dataclass(frozen=True)
class SlashCommand:
    name: str
    argument: str


def completions(text: str) -> list[str]:
    """Commands that complete what is typed (only while the first word is being typed)."""
    if not text.startswith("/") or any(ch.isspace() for ch in text):
        return []
    return [c for c in COMMANDS if c.startswith(text.lower())]


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
    name = name.lower()
    if name not in COMMANDS:
        return None
    return SlashCommand(name, argument.strip())


def unknown_command(text: str) -> str | None:
    """A reason to refuse `/something` that is not a command (text starting with // is sent)."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name = stripped.split()[0]
    if name.lower() in COMMANDS:
        return None
    known = " ".join(COMMANDS)
    return f"Unknown command {name}. Known: {known}. Start with // to send a message that begins with /."
