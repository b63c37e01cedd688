"""Plain data the store hands out. Frozen, so the UI can keep them without copying."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
STATUSES = ("partial", "complete", "error", "stopped")


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


@dataclass(frozen=True, slots=True)
class Attachment:
    """A document attached to a conversation; `text` is its extracted text."""

    id: str
    conversation_id: str
    alias: str
    path: str
    mime: str | None
    size: int | None
    text: str
    created_at: float


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable piece of an attachment; `source` is a label such as "page 3"."""

    id: int
    attachment_id: str
    ordinal: int
    text: str
    source: str | None
    embedding: bytes | None


MESSAGE_COLUMNS = (
    "id, conversation_id, role, content, reasoning, tool_calls, tool_results, usage, "
    "model, status, created_at, parent_id, error"
)


def new_id() -> str:
    """Row ids are uuid4 hex: unique across databases, so exports import cleanly."""
    return uuid.uuid4().hex


def storable(text: str) -> str:
    """`text` as SQLite can store it: UTF-8 cannot encode lone surrogates (a paste of
    invalid bytes, a file read with surrogateescape), and sqlite3 raised UnicodeEncodeError
    for them. Surrogate pairs become their character, a lone one U+FFFD; other text is
    returned as is (the check is one encode, ~20 us for 100 KB)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def dumps(value: Any) -> str | None:
    """JSON for a nullable column; compact and key-order stable."""
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def message_from_row(row: tuple[Any, ...]) -> Message:
    return Message(
        id=row[0],
        conversation_id=row[1],
        role=row[2],
        content=row[3],
        reasoning=row[4],
        tool_calls=loads(row[5]),
        tool_results=loads(row[6]),
        usage=loads(row[7]),
        model=row[8],
        status=row[9],
        created_at=row[10],
        parent_id=row[11],
        error=row[12],
    )


@dataclass(frozen=True, slots=True)
class Recovery:
    """What happened to a damaged database; `message` is for the user, as is."""

    moved_to: Path
    reason: str
    conversations: int
    messages: int
    message: str
