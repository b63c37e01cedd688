"""F5's model picker opens with its cursor on the model in use, not on the first row:
Enter then keeps the model, and a look down the list starts from where the chat is.

The list itself is a fixed one (fake_choices) so that the model in use stands third;
the app, its service and the picker's screen are the real ones.
"""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens import model_picker
from tui.screens.model_picker import ModelChoice, ModelPickerScreen

pytestmark = pytest.mark.timeout(120)


def _choice(model_id: str) -> ModelChoice:
    return ModelChoice(model_id, model_id, f"/models/{model_id}", "llamacpp", False)


async def test_the_picker_opens_on_the_model_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_choices(runtime: object) -> tuple[list[ModelChoice], list[tuple[str, str]]]:
        return [_choice("alpha:1b"), _choice("beta:2b"), _choice("scripted-test")], []

    monkeypatch.setattr(model_picker, "load_choices", fake_choices)
    app = scripted_app()  # its model's label: scripted-test
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and hasattr(app.screen, "choices"))
        assert app.screen.query_one(OptionList).highlighted == 2
        await pilot.press("escape")
        # Compare's picker asks for a second model: it opens on the first row, as before.
        app.main.composer.load_text("Hi")
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and hasattr(app.screen, "choices"))
        assert app.screen.query_one(OptionList).highlighted == 0
        await pilot.press("escape")


async def test_the_model_in_use_is_listed_when_not_in_the_models_folder() -> None:
    """`llmdeck --model ~/elsewhere/model`: the header, F4 and /api/tags named the model,
    but F5 listed only the models folder's, so after a switch there was no way back."""
    app = scripted_app()  # its model ("scripted") is in no models folder
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and hasattr(app.screen, "choices"))
        first = app.screen.choices[0]
        assert first.id == "scripted-test", app.screen.choices
        assert app.screen.query_one(OptionList).highlighted == 0
        assert str(app.screen.query_one(OptionList).get_option_at_index(0).prompt).startswith(
            "● scripted-test")
        await pilot.press("escape")
        # Compare's picker asks for a second model: not this one
        app.main.composer.load_text("Hi")
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and hasattr(app.screen, "choices"))
        assert "scripted-test" not in [c.id for c in app.screen.choices]
        await pilot.press("escape")
