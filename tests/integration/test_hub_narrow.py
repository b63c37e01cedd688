"""The hub's tables at 80 columns: every column a person needs shows without scrolling.

At 80 columns the Recommended tab hid "Where" (on disk or to download) and Local models
hid "Valid" behind a horizontal scrollbar; a new user never saw them.
"""

from __future__ import annotations

import pytest

from tests.fixtures.hub_screen import hub_app, open_hub, wait_until
from tui.widgets.hub_local import LocalTable
from tui.widgets.hub_recommended import RecommendedTable
from tui.widgets.measured_table import MeasuredTable, clip, fit_columns

NARROW = (80, 24)


def fits(table: MeasuredTable) -> bool:
    return table.virtual_size.width <= table.scrollable_content_region.width


def labels(table: MeasuredTable) -> list[str]:
    return [str(c.label) for c in table.ordered_columns]


async def test_recommended_and_local_tables_fit_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # offline: the list is data
    async with hub_app().run_test(size=NARROW) as pilot:
        screen = await open_hub(pilot, search=False)
        rec = screen.query_one(RecommendedTable)
        await wait_until(pilot, lambda: rec.recs and fits(rec))
        assert "Where" in labels(rec) and "Fits here" in labels(rec)
        assert all(str(rec.get_row_at(i)[-1]) in ("on disk", "needs the network")
                   for i in range(len(rec.recs)))
        await pilot.press("ctrl+t", "ctrl+t")
        local = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: local.models and local.has_focus)
        await wait_until(pilot, lambda: fits(local))
        assert labels(local)[0] == "Model" and labels(local)[-1] == "Valid"
        # the id leads the Model cell, whole
        assert str(local.get_row_at(0)[0]).startswith(local.models[0].model_id)


def test_fit_drops_optional_columns_first_then_cuts_the_squeezable_ones() -> None:
    widths = {"Repo": 30, "Runs": 10, "Likes": 5, "Gated": 5}
    assert fit_columns(widths, 0) == widths  # not laid out yet
    assert fit_columns(widths, 200) == widths
    # dropping Likes (7 cells with its padding) is enough: nothing is cut
    assert fit_columns(widths, 52, optional=("Likes",), squeeze={"Repo": 20}) == {
        "Repo": 30, "Runs": 10, "Gated": 5}
    # not enough: Repo is cut down to fit, never below its narrowest
    assert fit_columns(widths, 45, optional=("Likes",), squeeze={"Repo": 20}) == {
        "Repo": 24, "Runs": 10, "Gated": 5}
    assert fit_columns(widths, 10, optional=("Likes",), squeeze={"Repo": 20})["Repo"] == 20
    assert clip("mlx-community/Tiny-Chat-4bit", 10) == "mlx-commu…"
    assert clip("short", 10) == "short"
