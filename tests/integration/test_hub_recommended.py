"""The hub opens on the recommended list (data, shown offline too), each row says whether it
fits this machine at the configured context, and one key downloads and loads a model from
the loopback fake Hub."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.hub import recommended
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    MLX_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import SIZE, hub, hub_app, open_hub, wait_until
from tui.screens.hub import HubScreen
from tui.widgets.hub_recommended import RecommendedTable

FAKE_LIST = f"""
[[model]]
name = "Tiny Chat"
family = "llama"
good_at = "tests"
licence = "MIT"
layers = 2
kv_heads = 1
head_dim = 8
[model.gguf]
repo = "{GGUF_REPO}"
file = "tiny-chat-Q4_K_M.gguf"
size_bytes = 3_200_000
[model.mlx]
repo = "{MLX_REPO}"
size_bytes = 70_000

[[model]]
name = "Enormous"
family = "llama"
good_at = "nothing on this machine"
licence = "MIT"
layers = 200
kv_heads = 64
head_dim = 256
[model.gguf]
repo = "acme/Enormous-GGUF"
file = "enormous-Q4_K_M.gguf"
size_bytes = 9_000_000_000_000
[model.mlx]
repo = "mlx-community/Enormous-4bit"
size_bytes = 9_000_000_000_000
"""


@pytest.fixture
def fake_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "recommended.toml"
    path.write_text(FAKE_LIST, encoding="utf-8")
    monkeypatch.setattr(recommended, "RECOMMENDED_TOML", path)
    return path


def cells(table: RecommendedTable, row: int) -> list[str]:
    return [str(c) for c in table.get_row_at(row)]


async def test_one_key_downloads_and_loads_a_recommended_model(
        fake_hub: FakeHub, fake_list: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    switched: list[str] = []

    async def switch_model_recorder(path: str, engine: str | None = None) -> bool:
        switched.append(path)  # stands in for a worker load of a random-weight GGUF
        return True

    app = hub_app()
    monkeypatch.setattr(app.runtime, "switch_model", switch_model_recorder)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot, search=False)
        table = screen.query_one(RecommendedTable)
        await wait_until(pilot, lambda: len(table.recs) == 2)
        assert table.has_focus
        first, big = cells(table, 0), cells(table, 1)
        assert first[0] == "Tiny Chat" and first[3].startswith("yes ·") and first[4] == "needs the network"
        assert big[3].startswith("no ·")  # 9 TB plus its cache fits no machine here
        assert not any(path == "/api/models" for _, path, _ in fake_hub.requests)  # no search
        await pilot.press("d")
        await wait_until(pilot, lambda: switched)
        want = "tiny-chat-Q4_K_M.gguf" if table.recs[0].format == "gguf" else "Tiny-Chat-4bit"
        assert Path(switched[0]).name == want or want in switched[0]
        assert not isinstance(pilot.app.screen, HubScreen)
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: cells(table, 0)[4] == "on disk")


async def test_offline_the_list_still_shows_and_getting_one_says_why_not(
        fake_list: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on discard
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot, search=False)
        table = screen.query_one(RecommendedTable)
        await wait_until(pilot, lambda: len(table.recs) == 2)
        assert all(cells(table, i)[4] == "needs the network" for i in range(2))
        await pilot.press("enter")
        status = hub(pilot).query_one("#hub-rec-status")
        await wait_until(pilot, lambda: "OFFLINE" in str(status.render()))
        assert status.has_class("-error")


async def test_offline_mode_is_said_when_the_hub_opens(
        fake_list: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1: the Recommended tab says offline mode is on as it opens, not after a
    first `d` (it said "d downloads and loads one")."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot, search=False)
        table = screen.query_one(RecommendedTable)
        await wait_until(pilot, lambda: len(table.recs) == 2)
        status = screen.query_one("#hub-rec-status")
        shown = str(status.render())
        assert shown.startswith("OFFLINE: Offline mode is on (HF_HUB_OFFLINE)"), shown
        assert "For this machine" in shown and "d downloads" not in shown
        assert status.has_class("-error")
