"""The conversation store: one SQLite file (WAL) behind a small synchronous API.

The runtime owns one Store and calls it from one dedicated worker thread, never from the
UI loop; the connection is opened with check_same_thread=False for that, and an RLock
keeps a stray second caller from interleaving transactions. The connection runs in
autocommit mode and every write takes an explicit BEGIN IMMEDIATE, so a write never
half-happens and never waits on a lock upgrade deadlock.

This module holds the connection, its transactions and the conversation and message rows;
the branch tree (paging the active branch, switching, editing, deleting a subtree) is in
branches.py, attachment rows in attachments.py, sqlite errors' translation into
StoreError in sqlite_errors.py, argument checks in checks.py.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils


from . import exchange, search
from .attachments import AttachmentRows
from .branches import BranchTree, leaf_or_latest
from .checks import check_parent, check_role, check_status, conversation_gone, message_gone
from .errors import CANNOT_OPEN, NOT_A_DATABASE, StoreError
from .models import (
    MESSAGE_COLUMNS,
    Conversation,
    Message,
    Recovery,
    SearchHit,
    conversation_from_row,
    dumps,
    message_from_row,
    new_id,
    storable,
)
from .schema import FTS_TABLES, migrate, rebuild_fts, schema_version
from .sqlite_errors import corrupt, translate, user_facing
from .titles import auto_title

DEFAULT_BUSY_TIMEOUT_MS = 5000

_CONVERSATION_SELECT = """
SELECT c.id, c.title, c.model, c.created_at, c.updated_at,
       (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)
FROM conversations c
"""


class Store(BranchTree, AttachmentRows):
    """Conversations, messages, search, attachments; the branch tree comes from BranchTree
    (branches.py), attachment rows from AttachmentRows (attachments.py)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._lock = threading.RLock()
        self._db: sqlite_utils.Database | None = None
        # Set by core.store.recovery when this file replaced a damaged one (what to tell).
        self.recovery: Recovery | None = None

    @property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils over the same connection, built on first use: importing it costs
        100-300 ms, which the app's start-up (Store.open, the first conversation list)
        does not need to pay."""
        if self._db is None:
            sqlite_utils = _import_sqlite_utils()
            # No plugins (their discovery costs time) and no recursive triggers.
            self._db = sqlite_utils.Database(self.conn, recursive_triggers=False,
                                             execute_plugins=False)
        return self._db

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | None = None, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Store:
        """Open (creating or upgrading) the database at `path`, default paths.db_path()."""
        if path is None:
            from core import paths

            path = paths.db_path()
        path = Path(path)
        if path.is_dir():
            raise StoreError(
                NOT_A_DATABASE,
                f"{path} is a folder, not an llmdeck database; move it aside or pick a file path.",
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(path),
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                CANNOT_OPEN,
                f"Could not open the conversation database {path} ({exc}); check that the "
                "folder exists and is writable.",
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL: a commit survives a killed process (it is in the OS cache);
            # only a power cut can lose the last commits, never corrupt the file.
            conn.execute("PRAGMA synchronous = NORMAL")
            migrate(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, path) from exc
        return cls(conn, path)

    def quick_check(self, max_errors: int = 5) -> list[str]:
        """SQLite's quick_check: [] when the file is sound, else what is wrong (at most
        `max_errors` lines). O(file size): 22 ms at 18 MB, 195 ms at 178 MB (warm)."""
        with self._lock:
            try:
                rows = self.conn.execute(f"PRAGMA quick_check({int(max_errors)})").fetchall()
            except sqlite3.DatabaseError as exc:
                return [str(exc)]
        return [] if rows == [("ok",)] else [str(row[0]) for row in rows]

    def close(self) -> None:
        """Close the connection, first letting SQLite refresh its query-planner statistics
        (PRAGMA optimize is cheap and skips work it does not need)."""
        with self._lock:
            try:
                self.conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # a busy or read-only file: statistics can wait for the next close
            self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._lock:
            return schema_version(self.conn)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; sqlite errors a user can cause become StoreError."""
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise translate(exc, self.path) from exc
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                if user_facing(exc):
                    raise translate(exc, self.path) from exc  # type: ignore[arg-type]
                raise

    def _read(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if user_facing(exc):
                    raise translate(exc, self.path) from exc
                raise

    # -- conversations -------------------------------------------------------------------

    def create_conversation(self, title: str | None = None, model: str | None = None) -> str:
        conversation_id = new_id()
        now = time.time()
        title = storable(title) if title else title
        with self._write() as conn:
            conn.execute(
                "INSERT INTO conversations (id, title, title_source, model, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, title, "user" if title else None, model, now, now),
            )
        return conversation_id

    def list_conversations(self, limit: int = 100, offset: int = 0) -> list[Conversation]:
        """Newest activity first."""
        rows = self._read(
            _CONVERSATION_SELECT + " ORDER BY c.updated_at DESC, c.seq DESC LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [conversation_from_row(row) for row in rows]

    def get_conversation(self, conversation_id: str) -> Conversation | None:
        rows = self._read(_CONVERSATION_SELECT + " WHERE c.id = ?", (conversation_id,))
        return conversation_from_row(rows[0]) if rows else None

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET title = ?, title_source = 'user' WHERE id = ?",
                (storable(title.strip()), conversation_id),
            )
            if cur.rowcount == 0:
                raise conversation_gone(conversation_id)

    def set_generated_title(self, conversation_id: str, title: str) -> bool:
        """Use a model-written title unless the user has named the conversation; returns
        whether it was applied."""
        title = storable(" ".join(title.split()).strip("\"'"))
        if not title:
            return False
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET title = ?, title_source = 'model' "
                "WHERE id = ? AND (title_source IS NULL OR title_source != 'user')",
                (title, conversation_id),
            )
            return cur.rowcount == 1

    def set_conversation_model(self, conversation_id: str, model: str | None) -> None:
        with self._write() as conn:
            conn.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation with its messages and attachments (no-op if absent).
        Asking the user to confirm is the UI's job."""
        with self._write() as conn:
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages ------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        status: str = "complete",
        parent_id: str | None = None,
        model: str | None = None,
        reasoning: str = "",
        tool_calls: list[Any] | None = None,
        usage: dict[str, Any] | None = None,
        tool_results: list[Any] | None = None,
        error: str | None = None,
    ) -> str:
        """Append a message under `parent_id` (default: the active leaf) and make it the
        active leaf. The first user message titles an untitled conversation."""
        check_role(role)
        check_status(status)
        content, reasoning = storable(content), storable(reasoning)
        message_id = new_id()
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                "SELECT title, active_leaf_id FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                raise conversation_gone(conversation_id)
            title, leaf = row
            if parent_id is None:
                parent_id = leaf_or_latest(conn, conversation_id, leaf)
            else:
                check_parent(conn, conversation_id, parent_id)
            conn.execute(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, reasoning, "
                "tool_calls, tool_results, usage, model, status, error, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message_id, conversation_id, parent_id, role, content, reasoning,
                    dumps(tool_calls), dumps(tool_results), dumps(usage), model, status, error,
                    now,
                ),
            )
            conn.execute(
                "UPDATE conversations SET updated_at = ?, active_leaf_id = ? WHERE id = ?",
                (now, message_id, conversation_id),
            )
            if title is None and role == "user":
                conn.execute(
                    "UPDATE conversations SET title = ?, title_source = 'auto' WHERE id = ?",
                    (auto_title(content), conversation_id),
                )
        return message_id

    def update_message(
        self,
        message_id: str,
        *,
        content: str | None = None,
        reasoning: str | None = None,
        status: str | None = None,
        usage: dict[str, Any] | None = None,
        tool_calls: list[Any] | None = None,
        tool_results: list[Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Set the given fields (None leaves a field as it is). A status change also marks
        the conversation as active now."""
        fields: dict[str, Any] = {}
        if content is not None:
            fields["content"] = storable(content)
        if reasoning is not None:
            fields["reasoning"] = storable(reasoning)
        if status is not None:
            check_status(status)
            fields["status"] = status
        if usage is not None:
            fields["usage"] = dumps(usage)
        if tool_calls is not None:
            fields["tool_calls"] = dumps(tool_calls)
        if tool_results is not None:
            fields["tool_results"] = dumps(tool_results)
        if error is not None:
            fields["error"] = storable(error)
        with self._write() as conn:
            if fields:
                assignments = ", ".join(f"{name} = ?" for name in fields)
                found = conn.execute(
                    f"UPDATE messages SET {assignments} WHERE id = ?", [*fields.values(), message_id]
                ).rowcount
            else:
                found = len(conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchall())
            if found == 0:
                raise message_gone()
            if status is not None:
                conn.execute(
                    "UPDATE conversations SET updated_at = ? WHERE id = "
                    "(SELECT conversation_id FROM messages WHERE id = ?)",
                    (time.time(), message_id),
                )

    def get_message(self, message_id: str) -> Message | None:
        rows = self._read(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,))
        return message_from_row(rows[0]) if rows else None

    # -- search --------------------------------------------------------------------------

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Conversations matching `query`, best (bm25) first; see core.store.search for the
        query language and the «highlight» markers. Never raises on odd input."""
        with self._lock:
            try:
                return search.search(self.conn, query, limit)
            except MemoryError:  # SQLITE_NOMEM: a damaged count in the index (rebuild_fts)
                pass
            except sqlite3.DatabaseError as exc:  # a damaged index, never the query
                if not corrupt(exc):
                    if user_facing(exc):
                        raise translate(exc, self.path) from exc
                    raise
            # The search index is damaged (quick_check cannot see inside FTS5's blobs): it is
            # derived from the messages, so rebuild it from them and search again.
            self.rebuild_search_index()
            try:
                return search.search(self.conn, query, limit)
            except sqlite3.DatabaseError as exc:
                raise translate(exc, self.path) from exc

    def rebuild_search_index(self) -> None:
        """Rebuild both full-text indexes from the rows they index (seconds at 200,000
        messages); what a damaged index needs, and all it needs."""
        with self._write() as conn:
            for table in FTS_TABLES:
                rebuild_fts(conn, table)

    # -- export / import -----------------------------------------------------------------

    def export_json(self, conversation_id: str) -> str:
        """The whole conversation (every branch, attachments without chunks) as JSON."""
        with self._lock:
            return exchange.export_json(self.conn, conversation_id)

    def export_markdown(self, conversation_id: str) -> str:
        """The active branch as a readable Markdown document."""
        with self._lock:
            conversation = self.get_conversation(conversation_id)
            return exchange.export_markdown(conversation, self._whole_branch(conversation_id))

    def _whole_branch(self, conversation_id: str) -> list[Message]:
        page = self.messages(conversation_id, limit=500)
        out = list(page)
        while len(page) == 500:
            page = self.messages(conversation_id, limit=500, before=page[0].id)
            out[:0] = page
        return out

    def import_json(self, text: exchange.ImportSource) -> str:
        """Import an export_json document (text, a file path or a binary file, read as a
        stream within the limits in core/store/export_reader.py); returns the conversation
        id: the original one, or fresh ids for everything when that conversation already
        exists here (a message or attachment id alone that is taken gets a new one)."""
        with self._write() as conn:
            return exchange.import_json(conn, text)


def _import_sqlite_utils():  # noqa: ANN202  (the module)
    """Import sqlite-utils without its optional pandas probe: it imports pandas (and through
    it numpy) only to map DataFrame column types, which we never pass it, and that import
    alone took ~250 ms and 100,000 objects the garbage collector then walks."""
    if "sqlite_utils" in sys.modules or "pandas" in sys.modules:
        import sqlite_utils

        return sqlite_utils
    sys.modules["pandas"] = None  # type: ignore[assignment]  # import pandas -> ImportError
    try:
        import sqlite_utils
    finally:
        if sys.modules.get("pandas", 0) is None:
            del sys.modules["pandas"]
    return sqlite_utils
