"""Store faults while a reply streams: the runtime keeps going, says what was saved.

Real worker processes (the scripted engine), a real SQLite file. The database fills up
through SQLite itself: PRAGMA max_page_count caps the file at its current size, and the
next write that needs a page fails with SQLITE_FULL ("database or disk is full"), the
error a full disk gives. tests/integration/test_store_disk_full.py does it with a real
full filesystem.
"""

from __future__ import annotations

import pytest

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, Error, TextDelta
from core.runtime import Runtime

LONG_REPLY = "word " * 400


def _runtime(**options: object) -> Runtime:
    opts = {"reply": LONG_REPLY, "label": "scripted-test", **options}
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(opts.items()))
    return Runtime(Settings(), model_spec=spec)


def _fill_up(store) -> None:  # noqa: ANN001  (a Store, on the store thread)
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")


def _unfill(store) -> None:  # noqa: ANN001
    store.conn.execute("PRAGMA max_page_count = 1073741823")


@pytest.mark.timeout(60)
async def test_a_reply_stopped_with_esc_is_stored_as_stopped() -> None:
    rt = _runtime(tokens_per_s=200, chunk_chars=5)
    await rt.start(preload=False)
    try:
        turn = await rt.start_turn(None, "Tell me a long story")
        seen: list[object] = []
        async for event in turn.events():
            seen.append(event)
            if sum(isinstance(e, TextDelta) for e in seen) == 5:
                turn.cancel()  # what Esc does
        assert seen[-1] == Done("cancelled")
        stored = await rt.store_call(rt.store_handle.get_message, turn.assistant_message_id)
        assert stored is not None and stored.status == "stopped" and stored.error is None
        assert 0 < len(stored.content) < len(LONG_REPLY)
        assert LONG_REPLY.startswith(stored.content)
    finally:
        await rt.close()


@pytest.mark.timeout(60)
async def test_disk_full_mid_stream_keeps_running_keeps_the_saved_text_and_says_so() -> None:
    rt = _runtime(tokens_per_s=40, chunk_chars=40)
    await rt.start(preload=False)
    try:
        turn = await rt.start_turn(None, "Tell me a long story")
        seen: list[object] = []
        filled = False
        async for event in turn.events():
            seen.append(event)
            if isinstance(event, TextDelta) and not filled:
                # Once the partial row exists, the file may not grow any more.
                row = await rt.store_call(rt.store_handle.messages, turn.conversation_id)
                if len(row) == 2:
                    await rt.store_call(_fill_up, rt.store_handle)
                    filled = True
        assert filled
        errors = [e for e in seen if isinstance(e, Error)]
        assert [e.code for e in errors] == ["STORE_FAILED"]
        assert "full" in errors[0].message and "saved" in errors[0].message
        assert isinstance(seen[-1], Done)
        reply = await rt.store_call(rt.store_handle.get_message, turn.assistant_message_id)
        assert reply is not None and reply.status == "partial"  # what was stored stays
        assert reply.content and LONG_REPLY.startswith(reply.content)
        assert f"{len(reply.content):,} characters" in errors[0].message
        # Space comes back: the same runtime saves the next turn.
        await rt.store_call(_unfill, rt.store_handle)
        again = await rt.start_turn(turn.conversation_id, "Once more")
        async for _ in again.events():
            pass
        stored = await rt.store_call(rt.store_handle.get_message, again.assistant_message_id)
        assert stored is not None and stored.status == "complete" and stored.content == LONG_REPLY
    finally:
        await rt.close()
