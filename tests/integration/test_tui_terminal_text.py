"""Outside text never drives the terminal: a reply carrying escape sequences (OSC 52
writes the clipboard, OSC 0 the window title, CSI 2 J clears the screen, 0x9B is a
one-byte CSI) is drawn with those characters shown (␛), and a conversation title that
looks like Textual markup ("[/]") is drawn as written instead of raising MarkupError.

The real app on a pty (tests/helpers/pty_app.py): every byte it writes is read here.
"""

from __future__ import annotations

from pathlib import Path

from core.store import Store
from tests.fakes.hub_repos import catalog_files_fixture, fake_hub_fixture  # noqa: F401
from tests.fakes.hub_server import FakeHub
from tests.helpers import service_proc as svc
from tests.helpers.pty_app import CLI, PtyApp

CLIPBOARD = "cm0gLXJmIH4="  # base64 of a command someone wants the person to paste
REPLY = (f"Look: \x1b]0;OWNED\x07 then \x1b]52;c;{CLIPBOARD}\x07 and \x1b[2J and "
         "\x9b31m and \x1b[31mRED\x1b[0m done.")
TITLE = "[/] my [red]notes[/blue]"


def test_escape_sequences_in_a_reply_and_markup_in_a_title_are_drawn_not_obeyed(
        llmdeck_home: Path) -> None:
    """The `llmdeck` command on the home's service, whose model replies with the sequences:
    they cross the real socket and codec to the app, as a user's."""
    with Store.open(llmdeck_home / "data" / "llmdeck.db") as store:
        store.create_conversation(title=TITLE)
    svc.start(*svc.scripted_args(reply=REPLY))
    app = PtyApp({"LLMDECK_HOME": str(llmdeck_home)}, launch=CLI)
    try:
        app.read_until(lambda out: b"scripted" in out and b"my " in out, 60, "the app")
        app.type_line("hello")
        out = app.read_until(lambda out: b"done." in out, 30, "the reply")
    finally:
        app.close()
    assert b"\x1b]52;" not in out and b"\x1b]0;OWNED" not in out and b"\x1b[2J" not in out
    assert b"\xc2\x9b" not in out and b"\x9b31m" not in out
    shown = out.decode("utf-8", errors="replace")
    assert f"␛]52;c;{CLIPBOARD}" in shown and "␛]0;OWNED" in shown and "␛[2J" in shown
    assert "notes" in shown  # the title row drew (markup would have raised)


MARKUP = "[/] odd [red]x[/blue]"  # each of these two tags raised MarkupError when drawn
FOLDER = "[red]odd[bold] model"  # a file name has no "/": read as markup it lost its brackets


async def test_names_that_look_like_markup_are_drawn_as_written_everywhere(
        fake_hub: FakeHub) -> None:
    """A model labelled like markup (the header, the worker pane: a remote's model ids are
    anyone's words), a model folder named so (the picker's problem list), a notice quoting
    it, and a hub search for it: each drew as written; before, the label crashed the app
    on every frame and the search crashed it on Enter."""
    from core import paths
    from tests.fixtures.tui import scripted_app, send, wait_ready, wait_until
    from tui.screens.hub import HubScreen
    from tui.screens.model_picker import ModelPickerScreen
    from tui.widgets.status_bar import StatusBar

    folder = paths.models_dir() / FOLDER
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # listed, as broken: no tokenizer, no weights
    app = scripted_app(label=MARKUP)
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        assert MARKUP in str(app.main.query_one(StatusBar).render())
        await send(pilot, "hello")
        await pilot.press("f4")  # the worker pane: the model's label in a table
        await pilot.pause(0.5)
        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and FOLDER in str(app.screen.query_one("#model-problems").render()))
        await pilot.press("escape")
        app.notify(f"Loading {MARKUP}…")
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HubScreen))
        await pilot.press("slash")
        await pilot.press(*MARKUP, "enter")
        status = app.screen.query_one("#hub-search-status")
        await wait_until(pilot, lambda: MARKUP in str(status.render()))
        await pilot.pause(0.3)
        assert app.is_running
