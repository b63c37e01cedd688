"""The hub at 80 columns: every column a person needs shows without scrolling.

At 80 columns the Recommended tab hid "Where" (on disk or to download) and Local models
hid "Valid" behind a horizontal scrollbar; a new user never saw them. A download's row
showed its bar but neither its bytes nor whether it was done or cancelled.
"""

from __future__ import annotations

import pytest

from core.wire.hub import DownloadPlan, DownloadProgress
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import hub_app, open_hub, open_with_results, wait_until
from tui.hub_service_queue import ServiceJob
from tui.widgets.hub_downloads import DownloadsPanel
from tui.widgets.hub_local import LocalTable
from tui.widgets.hub_recommended import RecommendedTable
from tui.widgets.hub_results import ResultsTable
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


async def test_search_results_and_their_detail_line_fit_80_columns(fake_hub: FakeHub) -> None:
    """The results hid Likes to Gated behind a scrollbar, and the line under them (what
    the repo needs to run here) was cut at its first line's end."""
    async with hub_app().run_test(size=NARROW) as pilot:
        screen = await open_with_results(pilot)
        table = screen.query_one(ResultsTable)
        await wait_until(pilot, lambda: fits(table))
        assert {"Repo", "Runs here", "Size", "Gated"} <= set(labels(table))
        detail = screen.query_one("#hub-detail")
        text = str(detail.render())
        assert text.startswith(GGUF_REPO) and "needs about" in text
        await wait_until(pilot, lambda: detail.size.height * detail.size.width >= len(text))


def progress(state: str, downloaded: int) -> DownloadProgress:
    return DownloadProgress("acme/Tiny-Chat-GGUF", "tiny-chat-Q4_K_M.gguf", 0, 1, downloaded,
                            41_900_000, 2e6, 8.0, state)


async def test_download_rows_show_their_numbers_and_state_at_80_columns() -> None:
    async with hub_app().run_test(size=NARROW) as pilot:
        screen = await open_hub(pilot, search=False)
        panel = screen.query_one(DownloadsPanel)
        plan = DownloadPlan("acme/Tiny-Chat-GGUF", "main", "gguf", "tiny-chat-Q4_K_M.gguf", ())
        for job, state in ((ServiceJob(plan, "a"), "downloading"),
                           (ServiceJob(plan, "b"), "cancelled")):
            screen._on_download_update(job, progress(state, 14_700_000))
        await pilot.pause()
        right = panel.content_region.right
        for row in panel.rows.values():
            stats = row.query_one(".download-stats")
            text = str(stats.render())
            assert stats.region.width >= len(text) and stats.region.right <= right, text
        assert [str(r.query_one(".download-stats").render()).split(" · ")[-1]
                for r in panel.rows.values()] == ["ETA 0:08", "cancelled"]


async def test_a_download_that_ended_before_the_hub_opened_is_not_announced() -> None:
    """Each new window's hub said "Download finished" for every job the service had ever
    finished (the service lists them when the hub subscribes); its row says done."""
    async with hub_app().run_test(size=NARROW) as pilot:
        screen = await open_hub(pilot, search=False)
        plan = DownloadPlan("acme/Tiny-Chat-GGUF", "main", "gguf", "tiny-chat-Q4_K_M.gguf", ())
        screen._on_download_update(ServiceJob(plan, "old"), progress("done", 41_900_000))
        seen = ServiceJob(plan, "new")
        screen._on_download_update(seen, progress("downloading", 100))
        await pilot.pause()  # the row is drawn before the service's next push
        screen._on_download_update(seen, progress("done", 41_900_000))
        await wait_until(pilot, lambda: len(pilot.app._notifications) >= 1)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert [n.title for n in pilot.app._notifications] == ["Download finished"]


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
