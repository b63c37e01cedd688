"""The top line: app name, active model, its state, and context use."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from tui.terminal_text import visible

CHARS_PER_TOKEN = 4  # a rough count while a reply streams; its Usage gives the true one


def human_tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


class StatusBar(Static):
    """Renders from reactives so any update is one cheap refresh."""

    model_label: reactive[str] = reactive("no model")
    model_state: reactive[str] = reactive("idle")
    context_used: reactive[int] = reactive(0)
    context_size: reactive[int] = reactive(0)
    base_model: reactive[bool] = reactive(False)  # no chat template: answers are plain
    # The conversation to show is not known yet (the service's client, starting): no
    # "ctx 0" for a chat that is about to open (issue 48).
    opening: reactive[bool] = reactive(False)

    def render(self) -> Content:
        state = {"ready": "●", "loading": "◌ loading", "provisioning": "◌ preparing",
                 "failed": "✖ failed", "idle": "○", "connecting": "",
                 # the service's client without a service (tui.service_runtime)
                 "stopped": "■ service stopped (F10 starts it)",
                 "reconnecting": "◌ reconnecting"}.get(self.model_state, self.model_state)
        ctx = (f"{human_tokens(self.context_used)} / {human_tokens(self.context_size)}"
               if self.context_size and not self.opening else "")
        label = f"{self.model_label} · base model" if self.base_model else self.model_label
        # Content, not str: a str is read as markup, and a model named "[/]x.gguf" raised
        # MarkupError on every frame (the app could not start with it selected).
        head = f" llmdeck │ {label} {state}".rstrip()
        return Content(visible(head + (f" │ ctx {ctx}" if ctx else "")))

    def count_from(self, prompt: str) -> Callable[[str], None]:
        """Count ctx as a reply streams (about CHARS_PER_TOKEN characters a token) from
        what it said plus `prompt`; the reply's Usage then sets the exact figure. A new
        chat said "ctx 0" until its reply ended (issue 48)."""
        base = self.context_used + len(prompt) // CHARS_PER_TOKEN
        streamed = 0
        self.context_used = base

        def add(text: str) -> None:
            nonlocal streamed
            streamed += len(text)
            self.context_used = base + streamed // CHARS_PER_TOKEN

        return add
