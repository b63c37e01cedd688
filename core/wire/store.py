"""The store's plain data as the UI sees it: sidebar rows, messages, search hits, the
store's error, and the split of a search snippet into highlighted runs.

Frozen, so the UI can keep them without copying; they cross the socket as they are
(core.service.codec). core.store builds them from its rows and re-exports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

HIGHLIGHT_START = "«"
HIGHLIGHT_END = "»"


@dataclass(frozen=True, slots=True)
class Conversation:
    """A sidebar row. Times are Unix seconds (float); `message_count` counts every
    message of the conversation, all branches included."""

    id: str
    title: str | None
    model: str | None
    created_at: float
    updated_at: float
    message_count: int


@dataclass(frozen=True, slots=True)
class Message:
    """One message. `status` is partial while streaming (or after a crash mid-stream),
    complete, stopped (the user stopped the reply: its text is all there was), or error
    (then `error` says why). `parent_id` links the branch tree."""

    id: str
    conversation_id: str
    role: str
    content: str
    reasoning: str
    tool_calls: list[Any] | None
    tool_results: list[Any] | None
    usage: dict[str, Any] | None
    model: str | None
    status: str
    created_at: float
    parent_id: str | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """Best match of one conversation. `snippet` marks matched terms with
    HIGHLIGHT_START/HIGHLIGHT_END (« and »); `message_id` is None when the title matched
    better than any message. Lower `rank` is better (bm25 as FTS5 reports it)."""

    conversation_id: str
    title: str | None
    message_id: str | None
    snippet: str
    rank: float


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """Split a snippet into (text, highlighted) runs."""
    parts: list[tuple[str, bool]] = []
    for piece in re.split(f"({HIGHLIGHT_START}[^{HIGHLIGHT_END}]*{HIGHLIGHT_END})", snippet):
        if not piece:
            continue
        if piece.startswith(HIGHLIGHT_START) and piece.endswith(HIGHLIGHT_END):
            parts.append((piece[1:-1], True))
        else:
            parts.append((piece, False))
    return parts


# Codes, kept small and stable: the runtime and the UI switch on them.
SCHEMA_TOO_NEW = "SCHEMA_TOO_NEW"
NOT_A_DATABASE = "NOT_A_DATABASE"
CANNOT_OPEN = "CANNOT_OPEN"
MIGRATION_FAILED = "MIGRATION_FAILED"
LOCKED = "LOCKED"
DISK_FULL = "DISK_FULL"
NOT_FOUND = "NOT_FOUND"
BAD_IMPORT = "BAD_IMPORT"


class StoreError(Exception):
    """A store failure with a stable `code` and a user-facing `message`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"StoreError({self.code!r}, {self.message!r})"
