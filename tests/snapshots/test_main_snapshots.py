"""Snapshots of the main screen, with the scripted engine for byte-identical replies."""

from __future__ import annotations

from core.config import Settings
from tests.fixtures.tui import scripted_app, send, wait_ready, wait_until

SIZE = (120, 40)


def test_empty_main_screen(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_finished_exchange(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "What is the capital of France?")

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_load_error_in_chat_view(snap_compare) -> None:
    async def run_before(pilot) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: app.runtime.model.state == "failed")
        app.main.composer.cursor_blink = False
        await send(pilot, "Hello?")
        app.clear_notifications()  # the load-failure toast: shown or not by timing alone
        await pilot.pause(0.1)

    app = scripted_app(fail_load="LOAD_FAILED")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_a_cut_reply_says_so_under_it(snap_compare) -> None:
    """A reply at its length limit (max_tokens 4 here) shows the cut line and its key."""
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "Count to ten, please.")

    settings = Settings()
    settings.sampling.max_tokens = 4
    app = scripted_app(settings, replies=("One two three four five six seven eight.",))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
