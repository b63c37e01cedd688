"""The model picker (F5) marks the models the pool holds already: picking one of those
answers at once, since several models stay loaded.

The real app over a real home: two MLX model folders in the models folder, one of them
loaded (by the scripted engine, which reads no weights) as the app's model.
"""

from __future__ import annotations

import pytest

from core import paths
from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.tui import wait_ready, wait_until
from tui.app import LlmdeckApp

pytestmark = pytest.mark.timeout(120)


async def test_the_picker_marks_loaded_models() -> None:
    loaded = build_model_dir(paths.models_dir() / "Chat-A-1M", QWEN3_SHAPE, seed=1)
    build_model_dir(paths.models_dir() / "Chat-B-1M", QWEN3_SHAPE, seed=2)
    spec = ModelSpec(path=str(loaded), engine="scripted", context_size=4096,
                     options=(("reply", "ok"), ("label", "Chat-A-1M")))
    app = LlmdeckApp(Runtime(Settings(), model_spec=spec))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: len(getattr(pilot.app.screen, "choices", [])) >= 2)
        options = pilot.app.screen.query_one("OptionList")
        labels = {str(options.get_option_at_index(i).prompt) for i in range(options.option_count)}
        [a] = [t for t in labels if "Chat-A-1M" in t]
        [b] = [t for t in labels if "Chat-B-1M" in t]
        assert "  loaded" in a and "loaded" not in b  # before the file, which comes last
