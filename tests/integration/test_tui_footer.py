"""The footer shows the keys that matter where the focus is, and always fits the width;
the keys it leaves out still work and the help screen (F1) lists every one."""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from tests.fixtures.tui import scripted_app, seed_conversations, send, wait_ready, wait_until
from tui.app import LlmdeckApp
from tui.screens.help import binding_rows, help_groups
from tui.screens.main import MainScreen
from tui.widgets.message_view import MessageView


def footer_keys(app) -> list[str]:
    footer = app.screen.query_one(Footer)
    return [k.description or k.key_display for k in footer.query(FooterKey)]


def footer_fits(app) -> bool:
    footer = app.screen.query_one(Footer)
    used = sum(child.outer_size.width for child in footer.children)
    return used <= footer.size.width and footer.virtual_size.width <= footer.size.width


async def settle(pilot) -> None:
    await pilot.pause(0.2)  # the footer recomposes after the focus change is painted


@pytest.mark.parametrize("width", [80, 120])
async def test_footer_fits_and_follows_the_focus(width: int) -> None:
    seed_conversations([("Old question", "Old answer")])
    app = scripted_app(tokens_per_s=0.1, chunk_chars=40)
    async with app.run_test(size=(width, 30)) as pilot:
        await wait_ready(pilot)
        await settle(pilot)
        composer = footer_keys(app)
        assert footer_fits(app), composer
        assert {"Send", "Newline", "New chat", "Model"} <= set(composer)
        assert "Copy" not in composer and "Stop" not in composer

        await pilot.press("ctrl+f", "tab")  # the conversation list
        await settle(pilot)
        assert footer_fits(app)
        assert {"Rename", "Delete"} <= set(footer_keys(app))
        assert "New chat" not in footer_keys(app)

        await pilot.press("ctrl+l", *"Hi", "enter")  # a reply that streams on and on
        await wait_until(pilot, lambda: app.main.turn is not None)
        await settle(pilot)
        assert footer_fits(app)
        assert "Stop" in footer_keys(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.turn is None)

        await pilot.press("ctrl+up")  # a message
        await settle(pilot)
        assert isinstance(app.focused, MessageView)
        message = footer_keys(app)
        assert footer_fits(app), message
        assert {"Copy", "Regenerate", "Edit", "Delete"} <= set(message)
        assert "Branch" in str([label.render() for label in app.screen.query_one(Footer).children])
        assert "Send" not in message and "Model" not in message
        if width >= 120:
            assert "Help" in message


async def test_keys_left_out_of_the_footer_still_work_and_help_lists_them() -> None:
    app = scripted_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_ready(pilot)
        await settle(pilot)
        hidden = {"Settings", "Workers", "Run code", "Models", "Search"} - set(footer_keys(app))
        assert {"Workers", "Run code", "Settings"} <= hidden  # at 80 columns
        rows = {what for _, _, what in binding_rows(help_groups(LlmdeckApp, MainScreen))}
        assert hidden <= rows
        await pilot.press("f4")
        assert app.main.query_one("#worker-pane").display
        await pilot.press("f3")
        await wait_until(pilot, lambda: app.screen.__class__.__name__ == "SettingsScreen")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await send(pilot, "Hello")
        assert len(app.main.query(MessageView)) == 2


async def test_the_footer_rebuilds_its_keys_only_when_they_change() -> None:
    """A bindings signal that changes nothing (a focus move among widgets with the same
    keys, a resize within the same fit) keeps the footer's key widgets; one that changes
    the keys rebuilds them (the footer's rebuild was ~a tenth of a chat exchange's CPU)."""
    app = scripted_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_ready(pilot)
        await settle(pilot)
        footer = app.screen.query_one(Footer)
        before = list(footer.query(FooterKey))
        assert before
        for _ in range(3):
            app.screen.refresh_bindings()
            await settle(pilot)
        assert list(footer.query(FooterKey)) == before  # the same widgets, not rebuilt
        await pilot.press("ctrl+f", "tab")  # the conversation list: other keys
        await settle(pilot)
        assert "Rename" in footer_keys(app)
        assert not set(footer.query(FooterKey)) & set(before)
