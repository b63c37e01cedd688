"""The hub screen driven by keys against the loopback fake Hub: every error a user can
cause shows inline with its advice, downloads can be cancelled and resumed, local models
are deleted only after a yes, and loading one hands its path to the runtime."""

from __future__ import annotations

from pathlib import Path

from core.hub import list_local_models
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GATED_REPO,
    GGUF_REPO,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import (
    SIZE,
    hub_app,
    open_hub,
    open_repo,
    open_with_results,
    wait_until,
)
from tui.screens.hub import HubScreen
from tui.widgets.hub_downloads import DownloadsPanel
from tui.widgets.hub_files import FilesTable
from tui.widgets.hub_local import LocalTable
from tui.widgets.hub_results import ResultsTable


def text_of(screen: HubScreen, selector: str) -> str:
    return str(screen.query_one(selector).render())


def rows(screen: HubScreen) -> list:
    return list(screen.query_one(DownloadsPanel).rows.values())


async def test_palette_opens_the_hub_and_typed_search_filter_and_sort_use_it(
        fake_hub: FakeHub) -> None:
    async with hub_app().run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press(*"Models")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, HubScreen))
        screen = pilot.app.screen
        await pilot.press("slash")  # from the Recommended tab to the search box
        table = screen.query_one(ResultsTable)
        await wait_until(pilot, lambda: table.results)
        screen.query_one("#hub-query").focus()
        await pilot.pause()
        await pilot.press(*"tiny-chat", "enter")
        await wait_until(pilot, lambda: {r.repo_id for r in table.results}
                         == {GGUF_REPO, "mlx-community/Tiny-Chat-4bit"})
        assert table.has_focus  # Enter on the search moves on to the results
        await pilot.press("ctrl+g")  # all -> gguf
        await wait_until(pilot, lambda: [r.repo_id for r in table.results] == [GGUF_REPO])
        await pilot.press("slash", "ctrl+u", "enter")  # empty search: everything
        await pilot.press("ctrl+r")  # downloads -> likes
        await wait_until(pilot, lambda: screen.search_sort == "likes" and table.results
                         and table.results[0].repo_id == VISION_REPO)
        assert all(r.format == "gguf" for r in table.results)


async def test_search_while_the_hub_is_unreachable_says_offline(
        fake_hub: FakeHub, monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot)
        await wait_until(pilot, lambda: "OFFLINE" in text_of(screen, "#hub-search-status"))
        assert "HF_ENDPOINT" in text_of(screen, "#hub-search-status")
        assert screen.query_one("#hub-search-status").has_class("-error")


async def test_download_errors_show_inline_with_advice(fake_hub: FakeHub) -> None:
    """A projector picked alone, a gated repo, and a repo deleted since the search."""
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        files = await open_repo(pilot, VISION_REPO)
        proj = [f.path for f in files.files].index("mmproj-tiny-vl-f16.gguf")
        await pilot.press(*["down"] * (proj - files.cursor_row), "d")
        await wait_until(pilot, lambda: "BAD_REQUEST" in text_of(screen, "#hub-files-status"))
        assert "pick the model file" in text_of(screen, "#hub-files-status")
        assert rows(screen) == []

        await open_repo(pilot, GATED_REPO)
        await pilot.press("d")
        await wait_until(pilot, lambda: rows(screen) and rows(screen)[0].progress.finished)
        row = rows(screen)[0]
        assert row.progress.state == "error" and row.progress.error.code == "GATED"
        shown = str(row.query_one(".download-error").render())
        assert "accept its terms" in shown and f"{fake_hub.endpoint}/{GATED_REPO}" in shown

        del fake_hub.repos[GGUF_REPO]
        screen.query_one(ResultsTable).move_cursor(row=0)
        await open_repo(pilot, GGUF_REPO, wait=False)
        await wait_until(pilot, lambda: "NOT_FOUND" in text_of(screen, "#hub-files-status"))
        assert "check the spelling" in text_of(screen, "#hub-files-status")
        assert screen.query_one(FilesTable).listing is None


async def test_cancel_keeps_the_bytes_and_a_second_pull_resumes(fake_hub: FakeHub) -> None:
    fake_hub.throttle_bps = 512 * 1024
    name = "tiny-chat-Q4_K_M.gguf"
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        await pilot.press("d")
        await wait_until(pilot, lambda: rows(screen)
                         and rows(screen)[0].progress.downloaded > 256 * 1024)
        await pilot.press("c")
        await wait_until(pilot, lambda: rows(screen)[0].progress.finished)
        first = rows(screen)[0].progress
        assert first.state == "cancelled"
        assert "cancelled" in str(rows(screen)[0].query_one(".download-stats").render())
        fake_hub.throttle_bps = None
        screen.query_one(FilesTable).focus()
        await pilot.press("d")
        await wait_until(pilot, lambda: len(rows(screen)) == 2 and rows(screen)[1].progress.finished)
        assert rows(screen)[1].progress.state == "done"
        size = screen.query_one(FilesTable).listing.file(name).size
        # the second pull asked only for what the first had not kept
        assert 0 < first.downloaded < size
        ranges = [r for method, _, r in fake_hub.requests if method == "GET" and r]
        assert ranges == [f"bytes={first.downloaded}-"]
        await pilot.press("x")
        assert rows(screen) == []


async def test_delete_asks_first_and_the_bundled_model_stays(fake_hub: FakeHub) -> None:
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        await open_repo(pilot, VISION_REPO)
        await pilot.press("d")
        local = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: any(m.repo_id == VISION_REPO for m in local.models))
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: local.has_focus)
        assert local.current.repo_id == VISION_REPO  # the new download is selected
        path = local.current.path
        await pilot.press("delete")
        await wait_until(pilot, lambda: pilot.app.screen is not screen)
        await pilot.press("n")
        await wait_until(pilot, lambda: pilot.app.screen is screen)
        assert path.exists()
        await pilot.press("delete")
        await wait_until(pilot, lambda: pilot.app.screen is not screen)
        await pilot.press("y")
        await wait_until(pilot, lambda: not any(m.repo_id == VISION_REPO for m in local.models))
        assert not path.exists()
        assert not any(m.repo_id == VISION_REPO for m in list_local_models())

        assert local.current.source == "bundled"  # the only model left
        await wait_until(pilot, lambda: text_of(screen, "#hub-local-status").startswith(
            "1 model on this machine"))
        await pilot.press("delete")
        await wait_until(pilot, lambda: pilot.app.screen is not screen)
        await pilot.press("y")
        await wait_until(pilot, lambda: "BAD_REQUEST" in text_of(screen, "#hub-local-status"))
        assert "cannot be deleted" in text_of(screen, "#hub-local-status")


async def test_load_hands_the_path_to_the_runtime_and_returns_to_chat(
        fake_hub: FakeHub, monkeypatch) -> None:
    switched: list[str] = []

    async def switch_model_recorder(path: str, engine: str | None = None) -> bool:
        switched.append(path)  # stands in for a worker load of a random-weight GGUF
        return True

    app = hub_app()
    monkeypatch.setattr(app.runtime, "switch_model", switch_model_recorder)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        await pilot.press("d")
        local = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: any(m.repo_id == GGUF_REPO for m in local.models))
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: local.has_focus)
        expected = local.current.path
        await pilot.press("l")
        await wait_until(pilot, lambda: switched)
        assert Path(switched[0]) == expected and expected.name == "tiny-chat-Q4_K_M.gguf"
        assert not isinstance(pilot.app.screen, HubScreen)
        await pilot.press("ctrl+o")  # the same hub comes back, its download listed
        await wait_until(pilot, lambda: pilot.app.screen is screen)
        assert rows(screen)[0].progress.state == "done"
