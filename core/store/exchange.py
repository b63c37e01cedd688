"""Export a conversation to Markdown or JSON, and import the JSON back exactly.

The JSON carries every branch (messages in creation order, so parents come first), the
active leaf, and attachments without their chunks (chunks and embeddings are derived
data the documents feature can rebuild). Importing the export of a conversation into a
database that lacks it reproduces it byte for byte on the next export.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import Any

from core import json_text

from .errors import BAD_IMPORT, NOT_FOUND, StoreError
from .models import (
    MESSAGE_COLUMNS,
    ROLES,
    STATUSES,
    Conversation,
    Message,
    dumps,
    message_from_row,
    text_column,
)

FORMAT = "llmdeck.conversation"
FORMAT_VERSION = 1

_CONV_FIELDS = (
    "id", "title", "title_source", "model", "created_at", "updated_at", "active_leaf_id",
)
_MSG_FIELDS = (
    "id", "parent_id", "role", "content", "reasoning", "tool_calls", "tool_results",
    "usage", "model", "status", "error", "created_at",
)
_ATT_FIELDS = ("id", "alias", "path", "mime", "size", "text", "created_at")


def _gone() -> StoreError:
    return StoreError(NOT_FOUND, "This conversation no longer exists; nothing to export.")


def export_json(conn: sqlite3.Connection, conversation_id: str) -> str:
    row = conn.execute(
        f"SELECT {', '.join(_CONV_FIELDS)} FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if row is None:
        raise _gone()
    # Rows are read as the app reads them (models.message_from_row): a column another
    # program garbled exports as absent instead of raising out of the export.
    messages = [
        {name: getattr(message, name) for name in _MSG_FIELDS}
        for message in map(message_from_row, conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,)))
    ]
    attachments = [
        dict(zip(_ATT_FIELDS, values, strict=True))
        for values in conn.execute(
            f"SELECT {', '.join(_ATT_FIELDS)} FROM attachments WHERE conversation_id = ? "
            "ORDER BY created_at, rowid",
            (conversation_id,),
        )
    ]
    document = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "conversation": {**dict(zip(_CONV_FIELDS, row, strict=True)),
                         "title": None if row[1] is None else text_column(row[1])},
        "messages": messages,
        "attachments": attachments,
    }
    return json.dumps(document, ensure_ascii=False, indent=2)


def _bad(detail: str) -> StoreError:
    return StoreError(
        BAD_IMPORT, f"This file is not an llmdeck conversation export ({detail}); nothing was imported."
    )


def _parse(text: str) -> dict[str, Any]:
    try:
        document = json_text.loads(text)
    except (ValueError, TypeError) as exc:
        raise _bad(f"invalid JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _bad("missing format marker")
    if document.get("version") != FORMAT_VERSION:
        raise _bad(f"export format version {document.get('version')!r} is not supported")
    conversation = document.get("conversation")
    messages = document.get("messages")
    attachments = document.get("attachments", [])
    if not isinstance(conversation, dict) or not isinstance(messages, list):
        raise _bad("no conversation or messages")
    if not isinstance(attachments, list):
        raise _bad("attachments is not a list")
    if not isinstance(conversation.get("id"), str):
        raise _bad("conversation has no id")
    seen: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            raise _bad(f"message {index} has no id")
        if message.get("role") not in ROLES:
            raise _bad(f"message {index} has an unknown role {message.get('role')!r}")
        if message.get("status", "complete") not in STATUSES:
            raise _bad(f"message {index} has an unknown status {message.get('status')!r}")
        parent = message.get("parent_id")
        if parent is not None and parent not in seen:
            raise _bad(f"message {index} replies to a message that is not before it")
        seen.add(message["id"])
    for index, attachment in enumerate(attachments):
        if not isinstance(attachment, dict) or not isinstance(attachment.get("id"), str):
            raise _bad(f"attachment {index} has no id")
    return document


def import_json(conn: sqlite3.Connection, text: str) -> str:
    """Insert the document's conversation; the caller holds the write transaction."""
    document = _parse(text)
    conversation = document["conversation"]
    messages = document["messages"]
    attachments = document.get("attachments", [])
    # Keep the original ids unless any of them is already used here (importing into the
    # database it came from, or twice): then everything gets fresh ids.
    taken = (
        conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation["id"],)).fetchone()
        or conn.execute(
            "SELECT 1 FROM messages WHERE id IN (SELECT value FROM json_each(?)) LIMIT 1",
            (json.dumps([m["id"] for m in messages]),),
        ).fetchone()
        or conn.execute(
            "SELECT 1 FROM attachments WHERE id IN (SELECT value FROM json_each(?)) LIMIT 1",
            (json.dumps([a["id"] for a in attachments]),),
        ).fetchone()
    )
    ids: dict[str, str] = {}

    def remap(old: str | None) -> str | None:
        if old is None or not taken:
            return old
        return ids.setdefault(old, uuid.uuid4().hex)

    now = datetime.now(UTC).timestamp()
    conversation_id = remap(conversation["id"])
    leaf = conversation.get("active_leaf_id")
    conn.execute(
        "INSERT INTO conversations (id, title, title_source, model, created_at, updated_at, "
        "active_leaf_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id, conversation.get("title"), conversation.get("title_source"),
            conversation.get("model"),
            conversation.get("created_at", now), conversation.get("updated_at", now),
            remap(leaf) if leaf in {m["id"] for m in messages} else None,
        ),
    )
    try:
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, parent_id, role, content, reasoning, "
            "tool_calls, tool_results, usage, model, status, error, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    remap(m["id"]), conversation_id, remap(m.get("parent_id")), m["role"],
                    str(m.get("content", "")), str(m.get("reasoning", "")),
                    dumps(m.get("tool_calls")), dumps(m.get("tool_results")), dumps(m.get("usage")),
                    m.get("model"), m.get("status", "complete"), m.get("error"),
                    m.get("created_at", now),
                )
                for m in messages
            ],
        )
        conn.executemany(
            "INSERT INTO attachments (id, conversation_id, alias, path, mime, size, text, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    remap(a["id"]), conversation_id, a.get("alias", ""),
                    a.get("path", ""), a.get("mime"), a.get("size"), a.get("text", ""),
                    a.get("created_at", now),
                )
                for a in attachments
            ],
        )
    except sqlite3.IntegrityError as exc:
        # Only reachable with ids repeated inside the file itself.
        raise _bad(f"it repeats ids: {exc}") from exc
    return conversation_id  # type: ignore[return-value]


def export_markdown(conversation: Conversation | None, messages: list[Message]) -> str:
    """The active branch (`messages`, oldest first) as a readable Markdown document."""
    if conversation is None:
        raise _gone()
    lines = [f"# {conversation.title or 'Untitled conversation'}", ""]
    started = datetime.fromtimestamp(conversation.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines += [f"_Started {started}" + (f" · {conversation.model}_" if conversation.model else "_"), ""]
    for message in messages:
        heading = message.role.capitalize()
        if message.model and message.role == "assistant":
            heading += f" ({message.model})"
        if message.status != "complete":
            heading += f" [{message.status}]"
        lines += [f"## {heading}", ""]
        if message.reasoning:
            lines += ["<details><summary>Reasoning</summary>", "", message.reasoning, "", "</details>", ""]
        if message.content:
            lines += [message.content, ""]
        if message.tool_calls:
            lines += ["```json", json.dumps(message.tool_calls, ensure_ascii=False, indent=2), "```", ""]
        if message.error:
            lines += [f"> Error: {message.error}", ""]
    return "\n".join(lines).rstrip() + "\n"

