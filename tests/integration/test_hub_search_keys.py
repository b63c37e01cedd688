"""The search tab as the README tells it: `/` then the words. After ctrl+t the search box
already has the focus, so `/` went into the query ("/gemma" matched nothing), and the
empty answer read "No all repos match"."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import SIZE, hub_app, open_with_results, wait_until
from tui.widgets.hub_results import ResultsTable


@pytest.mark.slow
async def test_slash_in_the_focused_search_box_is_the_key_not_the_query(
        fake_hub: FakeHub) -> None:
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        box = screen.query_one("#hub-query", Input)
        box.focus()
        await pilot.pause()
        await pilot.press("slash", *"tiny-chat", "enter")
        table = screen.query_one(ResultsTable)
        await wait_until(pilot, lambda: GGUF_REPO in {r.repo_id for r in table.results})
        assert screen.query_text == "tiny-chat"
        box.focus()
        await pilot.pause()
        box.value = ""
        await pilot.press(*"nothing-like-it", "enter")
        status = screen.query_one("#hub-search-status")
        await wait_until(pilot, lambda: "match" in str(status.render()))
        assert str(status.render()).startswith("No repos match “nothing-like-it”")


async def test_one_result_reads_one_repo(fake_hub: FakeHub) -> None:
    """A search with one answer said "1 repos"."""
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        screen.query_one("#hub-query", Input).focus()
        await pilot.pause()
        await pilot.press(*"Tiny-Chat-GGUF", "enter")
        table = screen.query_one(ResultsTable)
        await wait_until(pilot, lambda: len(table.results) == 1)
        status = screen.query_one("#hub-search-status")
        await wait_until(pilot, lambda: str(status.render()).startswith("1 repo · "))
