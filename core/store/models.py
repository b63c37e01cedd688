"""Plain data the store hands out. Frozen, so the UI can keep them without copying."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import json_text
from core.wire.store import Conversation, Message, SearchHit  # noqa: F401  (the store's names)

ROLES = ("system", "user", "assistant", "tool")
STATUSES = ("partial", "complete", "error", "stopped", "cut")  # cut: at the length limit


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


# -- rows as another program (or a flipped bit) may have left them --------------------------
# SQLite's integrity check vouches for pages, not for what a column holds: a row edited by
# hand or by another tool can hold a blob where text goes or JSON of another shape. Such a
# message still opens (its garbled part reads as absent) instead of raising out of the UI.

# The usage counters the UI and the context gauge read as numbers.
_USAGE_NUMBERS = ("prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "decode_tps")


def text_column(value: Any) -> str:
    """A TEXT column's value as text (a blob decodes with replacement characters)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _json_column(value: Any, kind: type) -> Any:
    """A JSON column's value when it parses to `kind`, else None."""
    if value is None:
        return None
    try:
        parsed = json_text.loads(value)
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, kind) else None


def _usage(value: Any) -> dict[str, Any] | None:
    usage = _json_column(value, dict)
    if usage is None:
        return None
    return {k: v for k, v in usage.items() if k not in _USAGE_NUMBERS
            or (isinstance(v, int | float) and not isinstance(v, bool))}


def _entries(value: Any) -> list[Any] | None:
    """Tool calls or results: a list of JSON objects (anything else in it is dropped)."""
    items = _json_column(value, list)
    return None if items is None else [i for i in items if isinstance(i, dict)]


def _optional_text(value: Any) -> str | None:
    return None if value is None else text_column(value)


def _time(value: Any) -> float:
    """A REAL column of Unix seconds; text or a blob there reads as the epoch."""
    return float(value) if isinstance(value, int | float) else 0.0


def message_from_row(row: tuple[Any, ...]) -> Message:
    return Message(
        id=row[0],
        conversation_id=row[1],
        role=text_column(row[2]),
        content=text_column(row[3]),
        reasoning=text_column(row[4]),
        tool_calls=_entries(row[5]),
        tool_results=_entries(row[6]),
        usage=_usage(row[7]),
        model=_optional_text(row[8]),
        status=text_column(row[9]),
        created_at=_time(row[10]),
        parent_id=row[11],
        error=_optional_text(row[12]),
    )


@dataclass(frozen=True, slots=True)
class Recovery:
    """What happened to a damaged database; `message` is for the user, as is."""

    moved_to: Path
    reason: str
    conversations: int
    messages: int
    message: str


def conversation_from_row(row: tuple[Any, ...]) -> Conversation:
    """A sidebar row, its text columns as text (see text_column)."""
    cid, title, model, created, updated, count = row
    return Conversation(cid, _optional_text(title), _optional_text(model), _time(created),
                        _time(updated), int(count or 0))
