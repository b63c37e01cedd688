"""Keys posted to the app in one burst (as a terminal delivers a fast link, a script or a
paste: all queued before the first is handled) act in the order they were typed, also when
one of them moves focus or opens a screen. Pilot's press() waits after every key and could
never show this, so the keys go straight into the app's queue here, with no pause.

The scripted engine answers; the worker process, SQLite store and UI are the real ones.
"""

from __future__ import annotations

import asyncio
import sqlite3

from textual import events
from textual.command import CommandPalette
from textual.keys import _character_to_key
from textual.screen import ModalScreen
from textual.widgets import Input

from core import paths
from tests.fixtures.tui import scripted_app, seed_conversations, wait_ready, wait_until
from tui.widgets.message_view import MessageView
from tui.widgets.status_bar import StatusBar

ENTER = ("enter", "\r")
ESCAPE = ("escape", "\x1b")


def burst(app, *parts: str | tuple[str, str | None]) -> None:
    """Queue keys on the app at once: a str is typed text, a tuple is (key, character)."""
    for part in parts:
        if isinstance(part, tuple):
            app.post_message(events.Key(*part))
        else:
            for char in part:
                app.post_message(events.Key(char if char.isalnum() else _character_to_key(char), char))


async def settled(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.input_order.idle and app.main.at_rest)


def stored(role: str = "user") -> list[tuple[str, dict | None]]:
    import json

    with sqlite3.connect(paths.db_path()) as conn:
        rows = conn.execute("SELECT content, usage FROM messages WHERE role = ? ORDER BY seq", (role,))
        return [(content, json.loads(usage) if usage else None) for content, usage in rows]


async def test_editing_keys_apply_where_they_were_typed() -> None:
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        # Backspace and arrows are the TextArea's bindings, run after bubbling to the app:
        # without ordering, the backspace deleted the "d" typed after it.
        burst(app, "abc", ("backspace", "\x7f"), "d", ("left", None), ("left", None), "X")
        await settled(pilot)
        assert app.main.composer.text == "aXbd"


async def test_keys_after_a_focus_or_screen_change_go_where_it_leads() -> None:
    seed_conversations([("Paris trip notes", "Eiffel tower")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        composer = app.main.composer
        burst(app, ("ctrl+f", None), "paris")  # Ctrl+F moves focus to the search box
        await settled(pilot)
        assert app.main.query_one("#search", Input).value == "paris"
        assert composer.text == ""

        burst(app, ("ctrl+l", None), "draft", ("ctrl+p", None), "theme")  # the palette opens
        await settled(pilot)
        assert isinstance(app.screen, CommandPalette)
        assert app.screen.query_one(Input).value == "theme"
        assert composer.text == "draft"
        burst(app, ESCAPE, " kept", ("f1", None), ESCAPE, " and more")  # help opens and closes
        await settled(pilot)
        assert app.screen is app.main
        assert composer.text == "draft kept and more"
        assert composer.has_focus


class SlowInput(Input):
    """A box whose Esc takes as long as `gate` stays shut before it bubbles on to close the
    dialog: a starved box (the suite at load ~8 took over SETTLE_TIMEOUT_S to close the
    command palette, and the keys typed after its Esc queued behind it, in the palette)."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__()
        self.gate = gate

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            await self.gate.wait()
        await super()._on_key(event)


class SlowToClose(ModalScreen[None]):
    BINDINGS = [("escape", "dismiss")]

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__()
        self.gate = gate

    def compose(self):  # noqa: ANN201
        yield SlowInput(self.gate)

    def on_mount(self) -> None:
        self.query_one(Input).focus()


async def until(predicate, what: str) -> None:  # noqa: ANN001
    """Poll without pilot.pause, which waits on every widget (the stalled box too)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


async def slow_dialog_after_esc(pilot, caplog, *keys) -> tuple[asyncio.Event, Input]:  # noqa: ANN001
    """"draft" in the composer, a dialog whose Esc stalls, then Esc and `keys` in one burst;
    returns once the settle after Esc has timed out and the keys were taken from the queue
    (the old code typed them into the dialog's box then)."""
    app = pilot.app
    await wait_ready(pilot)
    burst(app, "draft")
    await settled(pilot)
    gate = asyncio.Event()
    app.push_screen(SlowToClose(gate))
    await wait_until(pilot, lambda: isinstance(app.screen, SlowToClose)
                     and isinstance(app.focused, Input))
    order = app.input_order
    box = app.screen.query_one(Input)
    burst(app, ESCAPE, *keys)
    await until(lambda: "ran past" in caplog.text and (
        not order._pending or getattr(order, "_holding_text", False)), "keys not taken")
    return gate, box


async def test_text_typed_after_a_slow_screen_change_waits_for_it_and_is_kept(
        monkeypatch, caplog) -> None:
    # The settle after Esc times out while the dialog is still up: the old code then typed
    # " kept" into the dialog's box, behind the Esc, and it went away with the dialog (the
    # full suite's `draft` for `draft kept and more`). Text now waits for the settle.
    monkeypatch.setattr("tui.key_order.SETTLE_TIMEOUT_S", 0.05)
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        gate, box = await slow_dialog_after_esc(pilot, caplog, " kept")
        typed_into_dialog = box.value
        gate.set()
        await settled(pilot)
        assert app.screen is app.main
        assert typed_into_dialog == ""
        assert app.main.composer.text == "draft kept"
        assert app.main.composer.has_focus


async def test_ctrl_q_is_not_held_behind_text_that_waits(monkeypatch, caplog) -> None:
    monkeypatch.setattr("tui.key_order.SETTLE_TIMEOUT_S", 0.05)
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        gate, _ = await slow_dialog_after_esc(pilot, caplog, " held")
        burst(app, ("ctrl+q", None))
        await until(lambda: app.return_code is not None,
                    "Ctrl+Q waited behind the held text")
        gate.set()


async def test_enter_on_search_results_opens_the_result_of_the_query_typed() -> None:
    # " france", Tab and Enter in one burst after "capital": Enter may reach the list while
    # it still shows the results for "capital", where the colour chat comes first. It opens
    # the France chat, the one the typed query finds, not the stale row. Each search takes
    # 0.3 s here, as on a slow disk, so Enter always meets the stale rows.
    france, colour = seed_conversations([("What is the capital of France?", "Paris."),
                                         ("Name a colour", "Capital red, capital blue.")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        rows = app.main.query_one("#conversations")
        real_search = app.runtime.search

        async def slow_disk_search(query: str, limit: int = 50):  # a big history, a slow disk
            await asyncio.sleep(0.3)
            return await real_search(query, limit)

        app.runtime.search = slow_disk_search

        def ids() -> list[str]:
            return [rows.get_option_at_index(i).id or "" for i in range(rows.option_count)]

        for _ in range(3):
            burst(app, ("ctrl+f", None), "capital")
            await wait_until(pilot, lambda: [i[:2] for i in ids()] == ["h:", "h:"])
            assert colour in ids()[0]  # the row Enter would have opened
            burst(app, " france", ("tab", "\t"), ENTER)
            await wait_until(pilot, lambda: app.main.conversation_id is not None)
            await settled(pilot)
            assert app.main.conversation_id == france
            burst(app, ("ctrl+n", None))
            await settled(pilot)
            app.main.query_one("#search", Input).value = ""
            await wait_until(pilot, lambda: ids()[0][:2] == "c:")


async def test_esc_and_enter_never_leave_the_composer_dead() -> None:
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        burst(app, ESCAPE, "first", ENTER)  # Esc with nothing streaming, then a message
        await settled(pilot)
        burst(app, ("ctrl+up", None), ESCAPE, "second", ENTER)  # from a message back, at once
        await settled(pilot)
        burst(app, ESCAPE, ESCAPE, ENTER, "third", ENTER)  # stray keys, then Enter then text
        await settled(pilot)
        assert [text for text, _ in stored()] == ["first", "second", "third"]
        assert app.main.composer.has_focus and app.main.composer.text == ""


async def test_messages_sent_while_a_reply_streams_queue_in_order() -> None:
    # Replies of 30, 1, 1 and 100 tokens at 20 tokens/s: the first and the last stream for
    # long enough (1.5 s, 5 s) for messages to be queued behind them.
    replies = ["Sure, " * 20, "Two.", "Three.", "A long answer. " * 26]
    app = scripted_app(replies=replies, tokens_per_s=20, chunk_chars=4)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        composer = app.main.composer
        burst(app, "one", ENTER)
        await wait_until(pilot, lambda: app.main.turn is not None)
        assert "esc stops" in str(composer.placeholder)  # busy, and says so
        burst(app, "two", ENTER)
        await wait_until(pilot, lambda: app.input_order.idle)
        burst(app, "three", ENTER)
        await wait_until(pilot, lambda: app.input_order.idle)
        assert list(app.main.outbox) == ["two", "three"]
        assert "2 queued" in str(composer.border_subtitle)
        await settled(pilot)
        assert [text for text, _ in stored()] == ["one", "two", "three"]
        assert composer.placeholder == "" and not composer.border_subtitle

        # Esc stops the reply and gives the queued messages back, nothing lost.
        burst(app, "four", ENTER)
        await wait_until(pilot, lambda: app.main.turn is not None)
        burst(app, "five", ENTER)
        await wait_until(pilot, lambda: app.input_order.idle and app.main.outbox)
        burst(app, ESCAPE)
        await settled(pilot)
        assert composer.text == "five"
        assert [text for text, _ in stored()] == ["one", "two", "three", "four"]


def conversation_of_each_message() -> list[tuple[str, str]]:
    with sqlite3.connect(paths.db_path()) as conn:
        return list(conn.execute("SELECT content, conversation_id FROM messages "
                                 "WHERE role = 'user' ORDER BY seq"))


async def test_ctrl_n_while_a_reply_streams_starts_the_new_chat_after_it() -> None:
    # Ctrl+N then a message in one burst while a reply streams: the message goes to a new
    # chat once the reply is done (it was refused, and the message landed in the old chat).
    app = scripted_app(replies=["Sure, " * 30, "New."], tokens_per_s=20, chunk_chars=4)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        burst(app, "first", ENTER)
        await wait_until(pilot, lambda: app.main.turn is not None)
        burst(app, ("ctrl+n", None), "second", ENTER)
        await wait_until(pilot, lambda: app.input_order.idle)
        assert app.main.queued_texts() == ["second"] and app.main.busy
        await settled(pilot)
        rows = conversation_of_each_message()
        assert [text for text, _ in rows] == ["first", "second"]
        assert rows[0][1] != rows[1][1]  # each in its own conversation
        assert app.main.conversation_id == rows[1][1]
        # The first reply was not cut short by the new chat.
        assert stored("assistant")[0][0] == "Sure, " * 30


async def test_the_context_meter_shows_the_conversations_tokens_after_each_reply() -> None:
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        bar = app.main.query_one(StatusBar)
        assert bar.context_used == 0
        seen = []
        for text in ("How big is Paris?", "And Lyon, compared with it?"):
            burst(app, text, ENTER)
            await settled(pilot)
            usage = stored("assistant")[-1][1]
            assert usage is not None
            seen.append(bar.context_used)
            assert bar.context_used == usage["prompt_tokens"] + usage["completion_tokens"] > 0
            assert f"ctx {bar.context_used}" in str(bar.render())
        assert seen[1] > seen[0]  # the second turn's prompt holds the first exchange
        burst(app, ("ctrl+n", None))
        await settled(pilot)
        assert bar.context_used == 0
        app.main.query_one("#search", Input).focus()
        await pilot.press("tab", "enter")  # reopen it from the list: the meter comes back
        await wait_until(pilot, lambda: len(app.main.query(MessageView)) == 4)
        assert bar.context_used == seen[1]
