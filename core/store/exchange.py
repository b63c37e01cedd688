"""Export a conversation to Markdown or JSON, and import the JSON back exactly.

The JSON carries every branch (messages in creation order, so parents come first), the
active leaf, and attachments without their chunks (chunks and embeddings are derived
data the documents feature can rebuild). Importing the export of a conversation into a
database that lacks it reproduces it byte for byte on the next export.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

from .errors import BAD_IMPORT, NOT_FOUND, StoreError
from .export_reader import (
    STREAMED,
    ExportLimits,
    ExportNotJson,
    ExportTooLarge,
    Member,
    read_export,
)
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


def _too_large(detail: str) -> StoreError:
    return StoreError(
        BAD_IMPORT, f"This export is too large to import: {detail}; nothing was imported. "
        "Export a smaller conversation, or split this one."
    )


ImportSource = str | bytes | os.PathLike[str] | IO[bytes]
DEFAULT_LIMITS = ExportLimits()  # what Store.import_json applies
_BATCH = 500  # rows checked for id collisions and inserted at a time


def import_json(conn: sqlite3.Connection, source: ImportSource,
                limits: ExportLimits | None = None) -> str:
    """Insert the export's conversation, reading it as a stream; the caller holds the
    write transaction, so a refusal part way (a limit, a bad message) leaves nothing.

    `source` is the export's text, or a path or binary file to read it from: the file is
    never held whole (see export_reader). Ids never overwrite: when the conversation's id
    is already used here (importing into the database it came from, or twice),
    everything gets fresh ids (a copy); otherwise any message or attachment id that is
    taken gets a fresh one, and the ids the file gives its messages must be unique and
    every parent must come before its replies, so the tree has no cycle."""
    limits = limits or DEFAULT_LIMITS
    try:
        if isinstance(source, os.PathLike):
            try:
                info = os.stat(source)
            except OSError as exc:
                raise _bad(f"it cannot be read: {exc.strerror}") from None
            if not stat.S_ISREG(info.st_mode):  # a FIFO would block the open for good
                raise _bad("it is not a regular file")
            size = info.st_size
            if size > limits.file_bytes:
                raise ExportTooLarge(f"it is {size / (1024 * 1024):.0f} MB, over the "
                                     f"{limits.file_bytes / (1024 * 1024):g} MB limit for an "
                                     "import")
            with open(source, "rb") as stream:
                _survey(stream, limits)
                stream.seek(0)
                return _Import(conn).run(read_export(stream, limits))
        if isinstance(source, str | bytes):
            _survey(source, limits)
        return _Import(conn).run(read_export(source, limits))
    except ExportTooLarge as exc:
        raise _too_large(str(exc)) from None
    except ExportNotJson as exc:
        raise _bad(f"invalid JSON: {exc}") from None
    except sqlite3.IntegrityError as exc:  # only reachable with ids repeated inside the file
        raise _bad(f"it repeats ids: {exc}") from exc


def _survey(source: str | bytes | IO[bytes], limits: ExportLimits) -> None:
    """Read the export once without writing, so a file past a limit or not JSON is
    refused in the seconds parsing takes (10^6 messages: ~3 s), not after the minutes of
    inserting 200,000 rows that a refusal would roll back."""
    for _ in read_export(source, limits):
        pass


def _text(value: Any, what: str) -> str | None:
    """A text column of the file: text or null; anything else is refused, not stored."""
    if value is None or isinstance(value, str):
        return value
    raise _bad(f"{what} has {type(value).__name__} where text goes")


def _time(value: Any, default: float, what: str) -> float:
    if value is None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    raise _bad(f"{what} has {value!r:.40} where a time goes")


class _Import:
    """One import: the header first, then messages and attachments in batches."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.header: dict[str, Any] = {}
        self.conversation_id: str | None = None
        self.copy = False  # the conversation's id is taken: every id is fresh
        self.ids: dict[str, str] = {}  # file id -> id written, where they differ
        self.seen: set[str] = set()  # message ids of the file so far (parents come first)
        self.attachment_ids: set[str] = set()
        self.now = datetime.now(UTC).timestamp()

    def run(self, members: Iterator[Member]) -> str:
        batch: list[dict[str, Any]] = []
        batch_key = ""
        for member in members:
            if member.index is None:
                if member.value is not STREAMED and self.conversation_id is not None:
                    raise _bad(f"its {member.key!r} comes after the messages")
                self.header[member.key] = member.value
                continue
            if self.conversation_id is None:
                self._begin()
            if batch and (member.key != batch_key or len(batch) >= _BATCH):
                self._flush(batch_key, batch)
                batch = []
            batch_key = member.key
            batch.append(self._checked(member))
        if self.conversation_id is None:
            self._begin()
        if batch:
            self._flush(batch_key, batch)
        leaf = self.header["conversation"].get("active_leaf_id")
        if isinstance(leaf, str) and leaf in self.seen:
            self.conn.execute("UPDATE conversations SET active_leaf_id = ? WHERE id = ?",
                              (self._id(leaf), self.conversation_id))
        return self.conversation_id  # type: ignore[return-value]

    def _begin(self) -> None:
        """The header is complete (a message or the end is here): check it, write the
        conversation row (its active leaf is set at the end, once its messages exist)."""
        header = self.header
        if header.get("format") != FORMAT:
            raise _bad("missing format marker")
        if header.get("version") != FORMAT_VERSION:
            raise _bad(f"export format version {header.get('version')!r} is not supported")
        conversation = header.get("conversation")
        if not isinstance(conversation, dict) or "messages" not in header:
            raise _bad("no conversation or messages, or its conversation comes after them")
        for key in ("messages", "attachments"):
            if key in header and header[key] is not STREAMED:
                raise _bad(f"{key} is not a list")
        if not isinstance(conversation.get("id"), str):
            raise _bad("conversation has no id")
        row = (
            _text(conversation.get("title"), "the title"),
            _text(conversation.get("title_source"), "the title source"),
            _text(conversation.get("model"), "the model"),
            _time(conversation.get("created_at"), self.now, "the conversation's time"),
            _time(conversation.get("updated_at"), self.now, "the conversation's time"),
        )
        self.copy = self.conn.execute("SELECT 1 FROM conversations WHERE id = ?",
                                      (conversation["id"],)).fetchone() is not None
        self.conversation_id = self._fresh(conversation["id"]) if self.copy \
            else conversation["id"]
        self.conn.execute(
            "INSERT INTO conversations (id, title, title_source, model, created_at, "
            "updated_at, active_leaf_id) VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (self.conversation_id, *row),
        )

    def _checked(self, member: Member) -> dict[str, Any]:
        """One message or attachment of the file, checked before anything is written."""
        index, value = member.index, member.value
        if member.key == "attachments":
            if not isinstance(value, dict) or not isinstance(value.get("id"), str):
                raise _bad(f"attachment {index} has no id")
            if value["id"] in self.attachment_ids:
                raise _bad(f"attachment {index} repeats the id of an earlier one")
            self.attachment_ids.add(value["id"])
            what = f"attachment {index}"
            size = value.get("size")
            if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
                raise _bad(f"{what}'s size is not a whole number")
            return {"id": value["id"], "alias": _text(value.get("alias"), what) or "",
                    "path": _text(value.get("path"), what) or "",
                    "mime": _text(value.get("mime"), what), "size": size,
                    "text": _text(value.get("text"), what) or "",
                    "created_at": _time(value.get("created_at"), self.now, what)}
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            raise _bad(f"message {index} has no id")
        if value.get("role") not in ROLES:
            raise _bad(f"message {index} has an unknown role {value.get('role')!r}")
        if value.get("status", "complete") not in STATUSES:
            raise _bad(f"message {index} has an unknown status {value.get('status')!r}")
        if value["id"] in self.seen:
            raise _bad(f"message {index} repeats the id of an earlier one")
        parent = value.get("parent_id")
        if parent is not None and parent not in self.seen:
            # A parent later in the file, or the message itself: the only ways to a cycle.
            raise _bad(f"message {index} replies to a message that is not before it")
        self.seen.add(value["id"])
        what = f"message {index}"
        return {**value, "content": _text(value.get("content"), what) or "",
                "reasoning": _text(value.get("reasoning"), what) or "",
                "model": _text(value.get("model"), what), "error": _text(value.get("error"), what),
                "created_at": _time(value.get("created_at"), self.now, what)}

    def _fresh(self, old: str) -> str:
        return self.ids.setdefault(old, uuid.uuid4().hex)

    def _id(self, old: str | None) -> str | None:
        return None if old is None else self.ids.get(old, old)

    def _remap_taken(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Give a fresh id to every row whose id is already used here."""
        if self.copy:
            for row in rows:
                self._fresh(row["id"])
            return
        taken = self.conn.execute(
            f"SELECT id FROM {table} WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([row["id"] for row in rows]),),
        ).fetchall()
        for (old,) in taken:
            self._fresh(old)

    def _flush(self, key: str, rows: list[dict[str, Any]]) -> None:
        cid = self.conversation_id
        if key == "messages":
            self._remap_taken("messages", rows)
            self.conn.executemany(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, "
                "reasoning, tool_calls, tool_results, usage, model, status, error, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        self._id(m["id"]), cid, self._id(m.get("parent_id")), m["role"],
                        m["content"], m["reasoning"],
                        dumps(m.get("tool_calls")), dumps(m.get("tool_results")),
                        dumps(m.get("usage")), m["model"], m.get("status", "complete"),
                        m["error"], m["created_at"],
                    )
                    for m in rows
                ],
            )
            return
        self._remap_taken("attachments", rows)
        self.conn.executemany(
            "INSERT INTO attachments (id, conversation_id, alias, path, mime, size, text, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (self._id(a["id"]), cid, a["alias"], a["path"], a["mime"], a["size"],
                 a["text"], a["created_at"])
                for a in rows
            ],
        )


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

