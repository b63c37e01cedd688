"""The model picker and the status line say "base model" for a model without a chat
template (engines report it in their info; the registry reads it from the files)."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tui.screens.model_picker import ModelChoice, choice_label
from tui.widgets.status_bar import StatusBar


def test_the_picker_marks_base_models() -> None:
    base = ModelChoice("bundled", "gemma.gguf", "/m/gemma.gguf", "llamacpp", True, True)
    chat = ModelChoice("x", "qwen.gguf", "/m/qwen.gguf", "llamacpp", False, False)
    assert "base model" in choice_label(base, "").plain
    assert "base model" not in choice_label(chat, "").plain


async def test_the_status_line_says_base_model() -> None:
    class Bar(App):
        def compose(self) -> ComposeResult:
            yield StatusBar()

    async with Bar().run_test() as pilot:
        bar = pilot.app.query_one(StatusBar)
        bar.model_label, bar.model_state = "Gemma 3 270M", "ready"
        assert "base model" not in str(bar.render())
        bar.base_model = True
        assert "Gemma 3 270M · base model ●" in str(bar.render())
