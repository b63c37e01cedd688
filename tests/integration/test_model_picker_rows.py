"""F5's model picker draws each model on one line: the bundled model in use wrapped its
"base model  loaded" onto a second line at 120 columns (and more at 80).

The list is a fixed one (fake_choices: the bundled model's id, file and engine, at the
path of the worker the scripted engine runs, so the pool holds it); the app, its service
and the picker's screen are the real ones.
"""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens import model_picker
from tui.screens.model_picker import ModelChoice, ModelPickerScreen

pytestmark = pytest.mark.timeout(120)
BUNDLED_ID, BUNDLED_FILE = "gemma3:270m-q4_k_m", "gemma-3-270m-q4_k_m.gguf"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_bundled_model_in_use_is_one_line(
        size: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_choices(runtime) -> tuple[list[ModelChoice], list[tuple[str, str]]]:
        [worker] = [w for w in runtime.worker_status() if w.state in ("idle", "busy")]
        return [ModelChoice(BUNDLED_ID, BUNDLED_FILE, worker.path, "llamacpp", True, True),
                ModelChoice("qwen3:4b-q4_k_m", "Qwen3-4B-Q4_K_M.gguf", "/m/q.gguf",
                            "llamacpp", False)], []

    monkeypatch.setattr(model_picker, "load_choices", fake_choices)
    app = scripted_app(label=BUNDLED_ID)  # the model in use: ● on the bundled row
    async with app.run_test(size=size) as pilot:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                         and hasattr(app.screen, "choices"))
        options = app.screen.query_one(OptionList)
        await pilot.pause()
        row = str(options.get_option_at_index(0).prompt)
        assert row.startswith(f"● {BUNDLED_ID}") and "base model" in row and "loaded" in row
        assert options._heights == {0: 1, 1: 1}, (size, row)  # noqa: SLF001
        shown = options.render_line(0).text  # what the row draws: the file gives way first
        assert f"● {BUNDLED_ID}  llamacpp  base model  loaded  gemma-3-" in shown, shown
        if size[0] >= 120:  # room for all of it
            assert shown.rstrip().endswith(BUNDLED_FILE), shown
        else:
            assert shown.rstrip().endswith("…"), shown
