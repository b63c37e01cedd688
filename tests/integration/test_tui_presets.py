"""Per-model presets in the app (issue 31, item 4), driven by keys: the settings screen
files the current settings as the model's preset, a new chat starts from it, and a picked
model loads with its own context size. The service applies them (Runtime.apply_preset):
the client's copy of the settings only follows, so a reply and a load see them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from core import presets
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens.main import MainScreen
from tui.screens.model_picker import ModelChoice

pytestmark = pytest.mark.timeout(240)
SIZE = (100, 32)
KEY = presets.model_key(None, "scripted-test")  # the scripted model has no file


async def retype(pilot, field_id: str, text: str) -> None:
    field = pilot.app.screen.query_one(field_id)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *text)


async def test_ctrl_r_in_settings_files_them_as_the_models_preset() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("f3")
        await pilot.pause(0.2)
        await retype(pilot, "#set-temperature", "0.25")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen)
                         and presets.presets_path().exists())
    saved = tomllib.loads(presets.presets_path().read_text())["presets"][KEY]
    assert saved["sampling"]["temperature"] == 0.25
    assert saved["context_size"] == 4096 and saved["system_prompt"] == ""


async def test_a_new_chat_starts_from_the_models_preset() -> None:
    presets.save(KEY, presets.Preset(sampling={"temperature": 0.15, "top_k": 7},
                                     system_prompt="Answer in French."))
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        settings = app.runtime.settings
        assert settings.system_prompt == ""  # the app starts from the global settings
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: settings.system_prompt == "Answer in French.")
        assert (settings.sampling.temperature, settings.sampling.top_k) == (0.15, 7)
        assert settings.sampling.to_params().temperature == 0.15
        served = app.runtime.local.settings  # the service's, which the next reply reads
        assert (served.system_prompt, served.sampling.temperature) == ("Answer in French.", 0.15)


async def test_a_picked_model_loads_with_its_presets_context_size(bundled_gguf: Path) -> None:
    key = presets.model_key(str(bundled_gguf), "Gemma")
    presets.save(key, presets.Preset(context_size=1024, sampling={"temperature": 0.0}))
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        choice = ModelChoice(key, "Gemma test", str(bundled_gguf), "llamacpp", False)
        app.use_model(choice)
        runtime = app.runtime
        await wait_until(pilot, lambda: runtime.settings.model == str(bundled_gguf)
                         and runtime.model.state == "ready", timeout=120)
        assert runtime.model.context_size == 1024  # the worker loaded it at the preset's size
        assert runtime.settings.sampling.temperature == 0.0
