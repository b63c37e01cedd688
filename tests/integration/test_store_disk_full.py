"""A home on a tiny, full filesystem (a real 2 MB tmpfs): F5 then Enter, and sending a
message, give sentences, never a crash, and lose nothing typed."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events
from textual.widgets import OptionList

from tests.fixtures.small_fs import tmpfs_fixture  # noqa: F401
from tests.fixtures.tui import scripted_app, type_burst, wait_ready, wait_until
from tui.screens.model_picker import ModelPickerScreen


def _fill(folder: Path) -> Path:
    """Write until the filesystem says ENOSPC; returns the filler file."""
    filler = folder / "filler"
    with pytest.raises(OSError) as full:
        with open(filler, "ab") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    assert full.value.errno == errno.ENOSPC
    return filler


async def _soon(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll without waiting for an idle process (Pilot.pause does, up to 1 s each)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


def _notes(app) -> str:  # noqa: ANN001
    return " ".join(str(n.message) for n in app._notifications)


async def test_f5_enter_and_send_on_a_full_two_megabyte_home(
        tmpfs, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    home = tmpfs("home", "2m")
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    app = scripted_app()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        # F5, Enter: the bundled model (250 MB) cannot be assembled into a 2 MB home.
        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and any(c.bundled for c in getattr(app.screen, "choices", ())))
        # the list opens on the model in use (the scripted one, listed first): go to the
        # bundled one by its row, as the arrow keys would
        picker = app.screen
        picker.query_one(OptionList).highlighted = next(
            i for i, c in enumerate(picker.choices) if c.bundled)
        await pilot.press("enter")
        await wait_until(pilot, lambda: "space" in _notes(app), timeout=60)
        assert app.is_running and "Could not" in _notes(app)
        assert not [p for p in (home / "data" / "models").iterdir() if p.suffix != ".lock"]
        await wait_until(pilot, lambda: not isinstance(app.screen, ModelPickerScreen))
        # Now fill what is left and send: the message comes back to the composer.
        _fill(home)
        app.main.composer.focus()
        await type_burst(pilot, "keep this text")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "Could not save your message" in _notes(app))
        assert "full" in _notes(app)
        assert app.main.composer.text == "keep this text"
        await pilot.press("f2")  # a new theme is saved to the config file: it cannot be
        await wait_until(pilot, lambda: "Could not save the settings" in _notes(app))
        assert app.is_running
    assert not [n for n in os.listdir(home / "data") if n.endswith(".tmp")]


async def test_disk_full_while_a_reply_streams_keeps_the_app_and_the_saved_text(
        tmpfs, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from core.store import Store
    from tui.widgets.message_view import MessageView

    home = tmpfs("home", "8m")
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    reply = "token " * 300
    app = scripted_app(reply=reply, tokens_per_s=60, chunk_chars=12)
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        await type_burst(pilot, "tell me a long story")
        # Not pilot.press("enter") nor wait_until: each waits for the process to go idle,
        # up to 1 s a time, and it never does while a reply streams; the 2.5 s reply was
        # over (and saved whole) before the disk filled, and the test saw no error.
        app.post_message(events.Key("enter", "\r"))
        await _soon(lambda: app.main.turn is not None
                    and app.main.turn.assistant_message_id is None
                    and len(app.main.query(MessageView)) >= 2
                    and len(list(app.main.query(MessageView))[-1].content) > 200)
        filler = _fill(home)  # the disk fills up mid-reply
        assert app.main.turn is not None, "the reply ended before the disk filled"
        await wait_until(pilot, lambda: app.main.turn is None, timeout=60)
        view = list(app.main.query(MessageView))[-1]
        shown = str(view.query_one(".error").render())
        assert "full" in shown and "saved" in shown, shown
        assert view.content == reply  # the whole reply stays on screen
        assert app.is_running
        cid = app.main.conversation_id
        # Renaming or deleting on the full disk: refused with a sentence, nothing lost.
        app.main._rename(cid, "a new title")
        await wait_until(pilot, lambda: "Not renamed" in [n.title for n in app._notifications])
        app.main._delete_conversation(cid)
        await wait_until(pilot, lambda: "Not deleted" in [n.title for n in app._notifications])
        app.main.run_search("token")  # reading still works
        await wait_until(pilot, lambda: app.main.query_one("#conversations").option_count == 1
                         and app.main.query_one("#conversations").get_option_at_index(0).id
                         .startswith(f"h:{cid}"))
        assert app.is_running and "full" in _notes(app)
        filler.unlink()  # space again: the next message is saved whole
        await type_burst(pilot, "and another")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main.turn is None
                         and len(app.main.query(MessageView)) >= 4, timeout=60)
    with Store.open(home / "data" / "llmdeck.db") as store:
        messages = store.messages(cid)
    stored = [m for m in messages if m.role == "assistant"]
    assert stored[0].status == "partial" and reply.startswith(stored[0].content)
    assert 0 < len(stored[0].content) < len(reply)  # what was stored before the disk filled
    assert stored[1].status == "complete" and stored[1].content == reply

