"""Snapshots of the model hub screen against the loopback fake Hub.

Results and file lists come from the real huggingface_hub client talking to the fake;
download rows in flight are rendered from fixed DownloadProgress values, because a live
transfer's rate and ETA differ on every run.
"""

from __future__ import annotations

import time

import pytest

from core.hub import DownloadProgress, HubError, recommended
from core.workers import WorkerStatus
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GATED_REPO,
    GGUF_REPO,
    MLX_REPO,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import (
    SIZE,
    hub,
    hub_app,
    open_hub,
    open_repo,
    open_with_results,
    wait_until,
)
from tui.widgets.hub_downloads import DownloadsPanel
from tui.widgets.hub_local import LocalTable

MB = 1_000_000


def test_recommended_tab_on_open(snap_compare, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real recommended list, as a 16 GB Linux machine sees it with no network: the
    machine's size and kind are fixed so the picture is the same everywhere."""
    monkeypatch.setattr(recommended, "total_memory_bytes", lambda: 16 * 10**9)
    monkeypatch.setattr(recommended, "machine_format", lambda *a: "gguf")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")

    async def run_before(pilot) -> None:
        screen = await open_hub(pilot, search=False)
        await wait_until(pilot, lambda: screen.query_one("#hub-recommended").row_count > 0)

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_search_results(snap_compare, fake_hub: FakeHub) -> None:
    async def run_before(pilot) -> None:
        await open_with_results(pilot)

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_file_list_offers_mmproj_with_its_model(snap_compare, fake_hub: FakeHub) -> None:
    async def run_before(pilot) -> None:
        await open_with_results(pilot)
        await open_repo(pilot, VISION_REPO)

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def _progress(repo: str, name: str, state: str, done: int, total: int, rate: float = 0.0,
              eta: float | None = None, index: int = 0, count: int = 1,
              error: HubError | None = None) -> DownloadProgress:
    return DownloadProgress(repo, name, index, count, done, total, rate, eta, state,  # type: ignore[arg-type]
                            error=error)


def test_downloads_in_progress(snap_compare, fake_hub: FakeHub) -> None:
    async def run_before(pilot) -> None:
        await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        panel = hub(pilot).query_one(DownloadsPanel)
        panel.show_progress("done", _progress(VISION_REPO, "mmproj-tiny-vl-f16.gguf", "done",
                                              197_100, 197_100, count=2),
                            f"{VISION_REPO} · tiny-vl-Q4_K_M.gguf")
        panel.show_progress("running", _progress(GGUF_REPO, "tiny-chat-Q4_K_M.gguf",
                                                 "downloading", int(1.3 * MB), int(3.1 * MB),
                                                 rate=850_000, eta=2.1),
                            f"{GGUF_REPO} · tiny-chat-Q4_K_M.gguf")
        panel.show_progress("waiting", _progress(MLX_REPO, "", "queued", 0, 65_900, count=4),
                            f"{MLX_REPO} (MLX)")
        await pilot.pause()

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_errors_inline(snap_compare, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that cannot reach the Hub, and three failed downloads with their advice."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on discard

    async def run_before(pilot) -> None:
        await open_hub(pilot)
        await wait_until(pilot, lambda: "OFFLINE" in str(
            hub(pilot).query_one("#hub-search-status").render()))
        panel = hub(pilot).query_one(DownloadsPanel)
        gated = HubError("GATED", f"{GATED_REPO} is gated: accept its terms at "
                         f"https://huggingface.co/{GATED_REPO} while logged in, then set "
                         "HF_TOKEN or run `hf auth login` so llmdeck can use your token.")
        missing = HubError("NOT_FOUND", "No model repo named acme/Gone-GGUF on "
                           "https://huggingface.co; check the spelling (owner/name). Private "
                           "repos need a token with access.")
        full = HubError("DISK_FULL", f"{GGUF_REPO} needs 3.1 MB more but only 1.0 MB is free "
                        "under /data/hf-cache; free some space or set LLMDECK_HOME/HF_HOME to "
                        "a larger disk.")
        for key, repo, err in (("g", GATED_REPO, gated), ("m", "acme/Gone-GGUF", missing),
                               ("f", GGUF_REPO, full)):
            panel.show_progress(key, _progress(repo, "", "error", 0, int(3.1 * MB), error=err),
                                repo)
        await pilot.pause()

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_local_models_and_delete_confirm(snap_compare, fake_hub: FakeHub) -> None:
    """A real download, listed on the local tab, with the delete dialog open over it."""
    async def run_before(pilot) -> None:
        screen = await open_with_results(pilot)
        await open_repo(pilot, VISION_REPO)
        await pilot.press("d")
        table = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: any(m.repo_id == VISION_REPO for m in table.models))
        await pilot.press("x")  # clear the finished row: its stats held a live rate
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: table.has_focus)
        pilot.app.clear_notifications()  # the "download finished" toast would time out
        await pilot.pause()
        await pilot.press("delete")
        await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmDialog")
        # what is loaded: shown as if the pool held the download (fixed figures; the hub
        # does not refresh them under a dialog)
        [model] = [m for m in table.models if m.repo_id == VISION_REPO]
        screen.show_loaded(table.models, workers=[WorkerStatus(
            "w1", model.model_id,  # the pool names a model by its id (issue 45)
            "llamacpp", "idle", 4243, 9 * MB, 0, 0, 0.0, 0,
            memory_bytes=int(3.4 * MB), last_used=time.time() - 42.4, idle_left_s=239.6,
            path=str(model.path))])
        await pilot.pause()

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_a_stalled_download_and_an_unverified_one(snap_compare, fake_hub: FakeHub) -> None:
    """A download the Hub stopped feeding says so and how to cancel it; one kept without a
    hash from the Hub says it is unverified."""
    async def run_before(pilot) -> None:
        await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        panel = hub(pilot).query_one(DownloadsPanel)
        panel.show_progress("unverified", DownloadProgress(
            GGUF_REPO, "tiny-chat-Q8_0.gguf", 0, 1, 262_144, 262_144, 0.0, None, "done",
            unverified=("tiny-chat-Q8_0.gguf",)), f"{GGUF_REPO} · tiny-chat-Q8_0.gguf")
        panel.show_progress("stalled", DownloadProgress(
            GGUF_REPO, "tiny-chat-Q4_K_M.gguf", 0, 1, int(1.3 * MB), int(3.1 * MB), 0.0, None,
            "downloading", stalled_s=12.2), f"{GGUF_REPO} · tiny-chat-Q4_K_M.gguf")
        await pilot.pause()

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)
