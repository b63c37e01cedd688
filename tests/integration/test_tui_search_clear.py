"""Ctrl+F's search, ended: Esc in the search box clears it and the sidebar lists every
conversation again. Before, nothing but deleting the query by hand did: the list kept the
old query's hits, and conversations made afterwards never showed in it."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.fixtures.tui import scripted_app, seed_conversations, wait_ready, wait_until


@pytest.mark.slow
async def test_esc_in_the_search_box_lists_every_conversation_again() -> None:
    seed_conversations([("What is the capital of France?", "Paris."),
                        ("Who wrote Hamlet?", "Shakespeare.")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        rows = app.main.query_one("#conversations")

        def ids() -> list[str]:
            return [rows.get_option_at_index(i).id or "" for i in range(rows.option_count)]

        await wait_until(pilot, lambda: [i[:2] for i in ids()] == ["c:", "c:"])
        await pilot.press("ctrl+f", *"Paris")
        await wait_until(pilot, lambda: [i[:2] for i in ids()] == ["h:"])
        await pilot.press("escape")
        await wait_until(pilot, lambda: [i[:2] for i in ids()] == ["c:", "c:"])
        assert app.main.query_one("#search", Input).value == ""
        assert app.main.composer.has_focus
