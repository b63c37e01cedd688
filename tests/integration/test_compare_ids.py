"""Compare names the second model by its one id, as the picker, F4 and the header do: its
column's title, its F4 row and its stored reply said the file name instead
("gemma-3-270m-q4_k_m.gguf" beside "tiny-gemma3:270m-q4_k_m")."""

from __future__ import annotations

import pytest

from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens.compare import CompareScreen
from tui.screens.model_picker import ModelChoice, ModelPickerScreen


@pytest.mark.slow
async def test_the_compared_model_goes_by_its_id() -> None:
    app = scripted_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        await pilot.press(*"Hi", "ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        # it picks the second model to compare with; it loads none in place of the chat's
        assert "Compare with which model?" in str(app.screen.query_one(".dialog-text").render())
        app.screen.dismiss(ModelChoice("right:1b-q4_k_m", "right-1b-Q4_K_M.gguf", "scripted",
                                       "scripted", False))
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        titles = [str(s.render()) for s in screen.query(".compare-model")]
        assert titles[1] == "2  right:1b-q4_k_m", titles
        await wait_until(pilot, lambda: screen.streamed, 30)
        await pilot.press("2")
        await wait_until(pilot, lambda: app.screen is app.main and app.main.conversation_id)
        stored = await app.runtime.messages(app.main.conversation_id)
        assert stored[-1].model == "right:1b-q4_k_m"
