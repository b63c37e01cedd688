"""Attachment and chunk rows for the documents feature (core.docs).

Extraction and embedding are slow, so their results live here: an attachment keeps the
document's extracted text, its chunks keep text, a source label ("page 3", "slide 2",
"sheet Budget") and an embedding as raw bytes (float32 from the embedder). Deleting the
conversation or the attachment deletes its chunks (foreign keys, ON DELETE CASCADE).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils

from .errors import NOT_FOUND, StoreError
from .models import Attachment, Chunk, new_id


class AttachmentRows:
    """Mixed into Store, whose connection, lock and transactions it uses."""

    db: sqlite_utils.Database
    conn: sqlite3.Connection
    _lock: threading.RLock

    def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...  # provided by Store

    def _read(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]: ...  # provided by Store

    def add_attachment(
        self,
        conversation_id: str,
        alias: str,
        path: str | Path,
        *,
        mime: str | None = None,
        size: int | None = None,
        text: str = "",
    ) -> str:
        attachment_id = new_id()
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone() is None:
                raise StoreError(
                    NOT_FOUND,
                    "This conversation no longer exists; it may have been deleted in another window.",
                )
            conn.execute(
                "INSERT INTO attachments (id, conversation_id, alias, path, mime, size, text, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (attachment_id, conversation_id, alias, str(path), mime, size, text, time.time()),
            )
        return attachment_id

    def attachments(self, conversation_id: str) -> list[Attachment]:
        with self._lock:
            # Plain SQL, not sqlite-utils: this runs whenever a conversation opens, and
            # importing sqlite-utils (with numpy) there stalled the first open (Store.db).
            rows = self.conn.execute(
                "SELECT id, conversation_id, alias, path, mime, size, text, created_at "
                "FROM attachments WHERE conversation_id = ? ORDER BY created_at, rowid",
                (conversation_id,),
            ).fetchall()
            return [Attachment(*row) for row in rows]

    def delete_attachment(self, attachment_id: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM attachments WHERE id = ?", (attachment_id,))

    def add_chunks(
        self, attachment_id: str, chunks: Iterable[tuple[str, str | None, bytes | None]]
    ) -> int:
        """Append (text, source label, embedding) chunks in order; returns how many."""
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM attachments WHERE id = ?", (attachment_id,)
            ).fetchone() is None:
                raise StoreError(
                    NOT_FOUND, "This attachment no longer exists; attach the document again."
                )
            start = conn.execute(
                "SELECT COALESCE(MAX(ordinal) + 1, 0) FROM chunks WHERE attachment_id = ?",
                (attachment_id,),
            ).fetchone()[0]
            rows = [
                (attachment_id, start + i, text, source, embedding)
                for i, (text, source, embedding) in enumerate(chunks)
            ]
            conn.executemany(
                "INSERT INTO chunks (attachment_id, ordinal, text, source, embedding) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def set_chunk_embeddings(self, embeddings: Iterable[tuple[int, bytes]]) -> None:
        """Store embeddings computed after the chunks were written: (chunk id, blob)."""
        with self._write() as conn:
            conn.executemany(
                "UPDATE chunks SET embedding = ? WHERE id = ?",
                [(blob, chunk_id) for chunk_id, blob in embeddings],
            )

    def chunks(self, attachment_id: str) -> list[Chunk]:
        rows = self._read(
            "SELECT id, attachment_id, ordinal, text, source, embedding FROM chunks "
            "WHERE attachment_id = ? ORDER BY ordinal",
            (attachment_id,),
        )
        return [Chunk(*row) for row in rows]

    def conversation_chunks(self, conversation_id: str) -> list[Chunk]:
        """Every chunk of every attachment of a conversation, for retrieval."""
        rows = self._read(
            "SELECT k.id, k.attachment_id, k.ordinal, k.text, k.source, k.embedding "
            "FROM chunks k JOIN attachments a ON a.id = k.attachment_id "
            "WHERE a.conversation_id = ? ORDER BY a.created_at, a.rowid, k.ordinal",
            (conversation_id,),
        )
        return [Chunk(*row) for row in rows]
