"""Ctrl+F's search, ended: Esc in the search box clears it and the sidebar lists every
conversation again. Before, nothing but deleting the query by hand did: the list kept the
old query's hits, and conversations made afterwards never showed in it."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.fixtures.tui import (
    scripted_app,
    seed_conversations,
    sidebar_kinds,
    wait_ready,
    wait_until,
)


@pytest.mark.slow
async def test_esc_in_the_search_box_lists_every_conversation_again() -> None:
    seed_conversations([("What is the capital of France?", "Paris."),
                        ("Who wrote Hamlet?", "Shakespeare.")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["c:", "c:"])
        await pilot.press("ctrl+f", *"Paris")
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["h:"])
        await pilot.press("escape")
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["c:", "c:"])
        assert app.main.query_one("#search", Input).value == ""
        assert app.main.composer.has_focus


@pytest.mark.slow
async def test_a_new_chat_after_opening_a_hit_lists_every_conversation() -> None:
    """Enter opens a hit and leaves the search on (the list still shows its hits); Ctrl+N
    then ends the search, so the new chat is in the list. Before, the sidebar kept showing
    the old query's one hit beside the new conversation being written."""
    seed_conversations([("What is the capital of France?", "Paris."),
                        ("Who wrote Hamlet?", "Shakespeare.")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["c:", "c:"])
        await pilot.press("ctrl+f", *"Paris")
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["h:"])
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main.conversation_id is not None)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["c:", "c:"])
        assert app.main.query_one("#search", Input).value == ""
