"""The settings screen's tool section, driven by keys in the real app: limits out of range
are refused with the reason and nothing is written; valid ones reach the TOML file and
the runtime's tool kit (approval policy, sandbox limits) at once."""

from __future__ import annotations

import tomllib

from core import paths
from core.config import Settings
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens.main import MainScreen

SIZE = (100, 32)


def why(app, name: str) -> str:
    return str(app.screen.query_one(f"#why-{name}").render())


async def retype(pilot, field_id: str, text: str) -> None:
    field = pilot.app.screen.query_one(field_id)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *text)



async def open_settings(pilot) -> None:
    """F3, then wait until the settings screen shows its fields (a fixed pause raced a
    loaded machine)."""
    await pilot.press("f3")
    await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__ == "SettingsScreen"
                     and bool(pilot.app.screen.query("#set-python_memory_mb")))

async def test_out_of_range_sandbox_limits_are_refused_with_the_reason() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_settings(pilot)
        await retype(pilot, "#set-python_timeout_s", "0")
        await retype(pilot, "#set-python_memory_mb", "64")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "between 1 and 3600 seconds" in why(app, "python_timeout_s"))
        assert app.screen.__class__.__name__ == "SettingsScreen"
        assert "between 256 and 65536 MiB" in why(app, "python_memory_mb")
        await retype(pilot, "#set-python_memory_mb", "lots")
        await wait_until(pilot, lambda: "must be a whole number" in why(app, "python_memory_mb"))
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        assert not paths.config_path().exists()
        assert app.runtime.settings.python_memory_mb == 1024
        assert app.runtime.local.tools.sandbox.timeout_s == 30.0


async def test_tool_settings_are_saved_to_toml_and_used_at_once() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_settings(pilot)
        for switch in ("#set-tools_enabled", "#set-python_asks"):
            app.screen.query_one(switch).focus()
            await pilot.press("space")  # both on by default: turn them off
        await retype(pilot, "#set-python_timeout_s", "12.5")
        await retype(pilot, "#set-python_memory_mb", "512")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        saved = tomllib.loads(paths.config_path().read_text())
        assert (saved["tools_enabled"], saved["python_asks"]) == (False, False)
        assert (saved["python_timeout_s"], saved["python_memory_mb"]) == (12.5, 512)
        tools = app.runtime.local.tools
        assert not tools.enabled and tools.offer({"family": "qwen3"}) == ()
        assert not tools.policy.needs_approval("any-chat", "python")
        assert (tools.sandbox.timeout_s, tools.sandbox.memory_mb) == (12.5, 512)
    loaded = Settings.load()
    assert (loaded.tools_enabled, loaded.python_asks, loaded.python_memory_mb) == (False, False, 512)


async def test_the_screen_opens_with_the_saved_tool_settings() -> None:
    Settings(tools_enabled=False, python_asks=True, python_timeout_s=90, python_memory_mb=2048).save()
    app = scripted_app(Settings.load())
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_settings(pilot)
        screen = app.screen
        assert screen.query_one("#set-tools_enabled").value is False
        assert screen.query_one("#set-python_asks").value is True
        assert screen.query_one("#set-python_timeout_s").value == "90"
        assert screen.query_one("#set-python_memory_mb").value == "2048"
