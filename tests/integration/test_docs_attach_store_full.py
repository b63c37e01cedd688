"""Attaching a file in a new chat when the store refuses to write (a full disk): the file
is reported as read but not saved, nothing half-exists, the app's runtime goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.docs import DocError
from core.docs.embeddings import ensure_model_files
from tests.fixtures.docs_runtime import scripted_runtime


@pytest.mark.slow
async def test_attach_in_a_new_chat_with_a_store_that_cannot_write(tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_text("The boiler was serviced on the third of May.\n" * 20, encoding="utf-8")
    rt = scripted_runtime(ensure_model_files())
    await rt.start(preload=False)
    try:
        # SQLite refuses every write from here on, as it does on a full disk.
        await rt.store_call(rt.store_handle.conn.execute, "PRAGMA query_only = ON")
        [result] = await rt.attach(None, [note])
        assert isinstance(result, DocError)
        assert "read but not saved" in result.message and "note.txt" in result.message
        assert await rt.list_conversations() == []
        await rt.store_call(rt.store_handle.conn.execute, "PRAGMA query_only = OFF")
        [again] = await rt.attach(None, [note])  # writable again: it attaches
        assert not isinstance(again, DocError)
    finally:
        await rt.close()
