"""The app with a garbage or damaged database: it says where the old file went, loads
its model, lists what was recovered, opens every conversation and chats on.

The real app (Textual pilot), the real worker pool (scripted engine), real SQLite files.
"""

from __future__ import annotations

import os

from core import paths
from tests.fixtures.store import damage_pages_of
from tests.fixtures.tui import (
    scripted_app,
    seed_conversations,
    send,
    type_burst,
    wait_ready,
    wait_until,
)
from tui.widgets.message_view import MessageView
from tui.widgets.sidebar import Sidebar


def _notes(app) -> str:  # noqa: ANN001
    return " ".join(str(n.message) for n in app._notifications)


async def test_a_garbage_database_is_moved_aside_and_the_app_chats_on() -> None:
    db = paths.db_path()
    garbage = os.urandom(20_000)
    db.write_bytes(garbage)
    app = scripted_app()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)  # the model loads (it never did: "start() was not awaited")
        await wait_until(pilot, lambda: "was moved to" in _notes(app))
        moved = next(db.parent.glob("llmdeck.db.damaged-*"))
        assert moved.read_bytes() == garbage and str(moved) in _notes(app)
        await send(pilot, "Hello after the damage")
        assert app.main.conversation_id is not None
        assert app.is_running


async def test_a_damaged_database_opens_every_recovered_conversation() -> None:
    ids = seed_conversations([(f"question {n} sourdough", "answer " + "crumb " * 400)
                              for n in range(24)])
    assert damage_pages_of(paths.db_path(), "messages") >= 3
    app = scripted_app()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        await wait_until(pilot, lambda: "messages were recovered" in _notes(app))
        sidebar = app.main.query_one(Sidebar)
        for cid in ids:  # the crash was here: opening a conversation with a damaged page
            sidebar.post_message(Sidebar.Opened(cid))
            await wait_until(pilot, lambda cid=cid: app.main.conversation_id == cid)
        assert app.is_running and "Cannot open" not in _notes(app)
        await send(pilot, "Still here?")
        assert len(app.main.query(MessageView)) >= 2


async def test_esc_mid_reply_is_shown_and_stored_as_stopped() -> None:
    reply = "word " * 300
    app = scripted_app(reply=reply, tokens_per_s=40, chunk_chars=5)
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        await type_burst(pilot, "tell me a story")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main.turn is not None
                         and len(list(app.main.query(MessageView))[-1].content) > 20)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.turn is None)
        view = list(app.main.query(MessageView))[-1]
        assert "(stopped)" in str(view.query_one(".role").render())
        stored = await app.runtime.local.store_call(app.runtime.local.store_handle.get_message,
                                              view.message_id)
        assert stored is not None and stored.status == "stopped"
        assert stored.content and reply.startswith(stored.content) and stored.content != reply
        # Reopened from the store, it still says so.
        await app.main.open_conversation(app.main.conversation_id)
        await pilot.pause()
        reopened = list(app.main.query(MessageView))[-1]
        assert "(stopped)" in str(reopened.query_one(".role").render())


async def test_a_database_edited_by_another_program_opens_and_chats_on() -> None:
    """Garbled JSON, a blob for text, counters that are words and a dangling active-leaf
    pointer: each used to crash the app on opening the conversation or to drop the next
    message silently."""
    import sqlite3

    ids = seed_conversations([("bad json", "a"), ("usage words", "b"), ("blob text", "c"),
                              ("dangling leaf", "d")])
    conn = sqlite3.connect(paths.db_path())
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE messages SET tool_calls = 'not json', usage = '[1]' "
                 "WHERE conversation_id = ?", (ids[0],))
    conn.execute("UPDATE messages SET usage = '{\"prompt_tokens\": \"many\"}' "
                 "WHERE conversation_id = ?", (ids[1],))
    conn.execute("UPDATE messages SET content = x'fffe00' WHERE conversation_id = ?", (ids[2],))
    conn.execute("UPDATE conversations SET title = x'ff00' WHERE id = ?", (ids[2],))
    conn.execute("UPDATE conversations SET active_leaf_id = 'gone' WHERE id = ?", (ids[3],))
    conn.commit()
    conn.close()
    app = scripted_app()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        sidebar = app.main.query_one(Sidebar)
        for cid in ids:
            sidebar.post_message(Sidebar.Opened(cid))
            await wait_until(pilot, lambda cid=cid: app.main.conversation_id == cid
                             and len(app.main.query(MessageView)) == 2)
        await send(pilot, "Still here?")  # in the conversation whose leaf pointer dangled
        roles = [v.role for v in app.main.query(MessageView)]
        assert roles == ["user", "assistant", "user", "assistant"] and app.is_running
    from core.store import Store

    with Store.open(paths.db_path()) as store:
        assert [m.content for m in store.messages(ids[3])][:3] == ["dangling leaf", "d",
                                                                   "Still here?"]
