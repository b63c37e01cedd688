"""The real app's search box under hostile input: 300 generated queries (lone surrogates,
FTS5 syntax, control characters, random code points, megabyte pastes) typed or pasted
into it; the app keeps running, every search answers, and a real query still finds its
conversation afterwards."""

from __future__ import annotations

import collections

import pytest
from textual.widgets import Input, OptionList

from tests.fixtures.hostile_text import hostile_strings
from tests.fixtures.tui import scripted_app, seed_conversations, wait_until

QUERIES = 300


def _searching(app) -> bool:  # noqa: ANN001
    return any(w.group == "search" and not w.is_finished for w in app.workers)


@pytest.mark.slow
async def test_hostile_queries_in_the_search_box_never_stop_the_app() -> None:
    [target, *_] = seed_conversations([
        ("How long should sourdough bread proof?", "Overnight in the fridge."),
        ("NEAR AND OR NOT * \" ( ) :", "Operators as plain words."),
    ])
    app = scripted_app()
    tried: collections.Counter[str] = collections.Counter()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_until(pilot, lambda: app.main.history_listed)
        await pilot.press("ctrl+f")
        box = app.main.query_one("#search", Input)
        await wait_until(pilot, lambda: box.has_focus)
        options = app.main.query_one("#conversations", OptionList)
        for n, (family, query) in enumerate(hostile_strings(QUERIES, seed=1919)):
            tried[family] += 1
            if n % 10 == 0 and query.isascii() and query.isprintable() and len(query) < 40:
                box.value = ""
                await pilot.press(*query)  # typed key by key, as a person would
            else:
                box.value = query  # pasted
            await pilot.pause()
            for _ in range(500):  # until the search worker has answered (no fixed sleep)
                if not _searching(app):
                    break
                await pilot.pause(0.002)
            assert not _searching(app), (family, ascii(query[:80]))
            assert app.is_running, (family, ascii(query[:80]))
            assert options.option_count >= 1  # hits, or the "No matches" line
        assert sum(tried.values()) == QUERIES
        box.value = "sourdough"
        await wait_until(pilot, lambda: not _searching(app)
                         and options.option_count >= 1
                         and (options.get_option_at_index(0).id or "").startswith(f"h:{target}"))
        assert app.is_running
