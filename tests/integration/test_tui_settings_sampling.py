"""The settings screen's sampling fields, driven by keys in the real app: out-of-range
values are refused with the reason and nothing is written; valid ones reach the TOML file
and the SamplingParams of the next reply."""

from __future__ import annotations

import tomllib

from core import paths
from core.config import Settings
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui import settings_form as form
from tui.screens.main import MainScreen

SIZE = (100, 32)


async def retype(pilot, field_id: str, text: str) -> None:
    field = pilot.app.screen.query_one(field_id)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *text)


def why(app, name: str) -> str:
    return str(app.screen.query_one(f"#why-{name}").render())



async def open_settings(pilot) -> None:
    """F3, then wait until the settings screen shows its fields (a fixed pause raced a
    loaded machine)."""
    await pilot.press("f3")
    await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__ == "SettingsScreen"
                     and bool(pilot.app.screen.query("#set-python_memory_mb")))

async def test_sampling_fields_are_checked_then_saved_to_toml_and_used() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_settings(pilot)
        await retype(pilot, "#set-presence_penalty", "3")
        await retype(pilot, "#set-seed", "-4")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "between -2 and 2" in why(app, "presence_penalty"))
        assert app.screen.__class__.__name__ == "SettingsScreen"
        assert "from 0, or blank" in why(app, "seed")
        assert not paths.config_path().exists()
        await retype(pilot, "#set-presence_penalty", "0.5")
        await retype(pilot, "#set-frequency_penalty", "-0.25")
        await retype(pilot, "#set-repetition_penalty", "1.1")
        await retype(pilot, "#set-min_p", "0.05")
        await retype(pilot, "#set-penalty_window", "128")
        await retype(pilot, "#set-seed", "42")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        saved = tomllib.loads(paths.config_path().read_text())["sampling"]
        assert (saved["presence_penalty"], saved["frequency_penalty"]) == (0.5, -0.25)
        assert (saved["repetition_penalty"], saved["min_p"]) == (1.1, 0.05)
        assert (saved["penalty_window"], saved["seed"]) == (128, 42)
    sp = Settings.load().sampling.to_params()
    assert (sp.presence_penalty, sp.frequency_penalty, sp.seed) == (0.5, -0.25, 42)
    assert sp.presence_context_size == sp.frequency_context_size == sp.repetition_context_size == 128
    sp.validate()


def test_a_blank_seed_is_random_and_saves_as_minus_one() -> None:
    assert form.seed("") == -1 and form.seed(" 7 ") == 7
    assert Settings().sampling.to_params().seed is None


async def test_the_speculative_switch_saves_to_toml() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_settings(pilot)
        switch = app.screen.query_one("#set-speculative")
        assert switch.value is True  # on by default
        switch.focus()
        await pilot.press("space")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert tomllib.loads(paths.config_path().read_text())["speculative"] is False
    assert Settings.load().speculative is False


async def test_a_model_state_arriving_as_the_app_closes_is_ignored() -> None:
    """Saving the speculative switch reloads the model; leaving at once let the reload's
    end reach a chat screen whose widgets shutdown had removed (NoMatches: StatusBar) and
    the app ended with an error. Here the removal comes first, then the state."""
    from tui.widgets.status_bar import StatusBar

    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await app.main.query_one(StatusBar).remove()  # what shutdown does first
        app.runtime.local.models.notify()  # the reload that finished meanwhile
        await pilot.pause()
    assert app.return_code in (0, None)
