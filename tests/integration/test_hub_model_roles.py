"""The hub's Local models picks the vision model and the draft model (v and f on a row),
saved to config.toml, shown in the Role column; again on the same model clears it; a GGUF
is refused for either with a sentence saying what would work.

The real app and hub screen over a real home: an MLX model folder (random weights) in the
models folder and the bundled GGUF; nothing loads (the settings are what changes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import paths
from core.config import Settings
from tests.fixtures.hub_screen import SIZE, hub_app, open_hub, wait_until
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tui.widgets.hub_local import LocalTable

pytestmark = pytest.mark.timeout(120)


def status(screen) -> str:
    return str(screen.query_one("#hub-local-status").render())


async def test_v_and_f_pick_the_vision_and_draft_models_and_save_them() -> None:
    folder = build_model_dir(paths.models_dir() / "TinyQwen-1M", QWEN3_SHAPE, seed=1)
    app = hub_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot, search=False)
        await pilot.press("ctrl+t", "ctrl+t")  # Recommended -> Search -> Local models
        table = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: table.has_focus and len(table.models) == 2)
        assert table.current is not None and table.current.path == folder  # listed first
        await pilot.press("v")
        await wait_until(pilot, lambda: "is the vision model" in status(screen))
        await pilot.press("f")
        await wait_until(pilot, lambda: "is the draft model" in status(screen))
        saved = Settings.load()
        assert saved.vision_model == str(folder) and saved.draft_model == str(folder)
        role = str(table.get_cell(table.models[0].id, "Role"))  # by name: narrow drops some
        assert role.endswith("vision model, draft model")
        await pilot.press("v")  # again: cleared
        await wait_until(pilot, lambda: "no longer the vision model" in status(screen))
        assert Settings.load().vision_model is None
        await pilot.press("down", "v")  # the bundled GGUF cannot describe images here
        await wait_until(pilot, lambda: "is a GGUF" in status(screen))
        assert "mlx-vlm" in status(screen) and Settings.load().vision_model is None
        assert Path(Settings.load().draft_model or "") == folder
