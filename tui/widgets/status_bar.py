"""The top line: app name, active model, its state, and context use."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from tui.terminal_text import visible


def human_tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


class StatusBar(Static):
    """Renders from reactives so any update is one cheap refresh."""

    model_label: reactive[str] = reactive("no model")
    model_state: reactive[str] = reactive("idle")
    context_used: reactive[int] = reactive(0)
    context_size: reactive[int] = reactive(0)
    base_model: reactive[bool] = reactive(False)  # no chat template: answers are plain

    def render(self) -> Content:
        state = {"ready": "●", "loading": "◌ loading", "provisioning": "◌ preparing",
                 "failed": "✖ failed", "idle": "○"}.get(self.model_state, self.model_state)
        ctx = (f"{human_tokens(self.context_used)} / {human_tokens(self.context_size)}"
               if self.context_size else "")
        label = f"{self.model_label} · base model" if self.base_model else self.model_label
        # Content, not str: a str is read as markup, and a model named "[/]x.gguf" raised
        # MarkupError on every frame (the app could not start with it selected).
        return Content(visible(f" llmdeck │ {label} {state} │ ctx {ctx}".rstrip(" │ctx")))
