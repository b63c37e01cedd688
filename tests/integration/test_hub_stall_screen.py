"""The hub screen with a Hub that stops sending mid-download: the row says it is stalled
long before the stall timeout, and `c` (or Esc, while a download is stalled) ends the
download at once, though the download's thread is blocked in a read that no data will
ever end."""

from __future__ import annotations

import time

import pytest

from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import SIZE, hub_app, open_repo, open_with_results, wait_until
from tui.widgets.hub_downloads import DownloadsPanel


def _note(screen) -> str:  # noqa: ANN001
    """The line under the download's row (where a stall or an error is said)."""
    [row] = screen.query_one(DownloadsPanel).rows.values()
    note = row.query_one(".download-error")
    return str(note.render()) if note.display else ""


def _stats(screen) -> str:  # noqa: ANN001
    [row] = screen.query_one(DownloadsPanel).rows.values()
    return str(row.query_one(".download-stats").render())


@pytest.mark.parametrize("key", ["c", "escape"])
async def test_a_stalled_download_shows_it_and_a_key_cancels_it_at_once(
        fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv("LLMDECK_HUB_STALL_NOTICE", "0.3")
    monkeypatch.setenv("LLMDECK_HUB_STALL_TIMEOUT", "60")  # the person, not a timeout, ends it
    monkeypatch.setenv("LLMDECK_HUB_FIRST_BYTE_TIMEOUT", "60")
    fake_hub.stall_after = 300
    fake_hub.hang_limit_s = 60
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        await pilot.press("d")
        await wait_until(pilot, lambda: screen.query_one(DownloadsPanel).rows
                         and "stalled: no data for" in _note(screen), timeout=10)
        assert "Esc or c cancels" in _note(screen)
        [row] = screen.query_one(DownloadsPanel).rows.values()
        assert row.has_class("-stalled") and row.progress.state == "downloading"
        began = time.monotonic()
        await pilot.press(key)
        await wait_until(pilot, lambda: row.progress.finished, timeout=5)
        assert time.monotonic() - began < 1.0
        assert row.progress.state == "cancelled"
        assert "cancelled" in _stats(screen) and "stalled" not in _note(screen)
        assert not row.has_class("-stalled")
        assert pilot.app.screen is screen  # Esc cancelled; it did not also leave
        await pilot.press("escape")  # nothing stalls now: Esc goes back to the chat
        await wait_until(pilot, lambda: pilot.app.screen is not screen)
