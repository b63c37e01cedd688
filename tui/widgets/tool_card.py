"""A tool call shown as a card: name, arguments, state and result.

The tools engineer drives `state` (awaiting-approval, running, done, failed, denied) and
`result`; the card only renders them, so the chat view never knows how tools run.
"""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from tui.terminal_text import visible

STATES = ("awaiting-approval", "running", "done", "failed", "denied")
STATE_LABELS = {
    "awaiting-approval": "◇ awaiting approval",
    "running": "◌ running",
    "done": "✔ done",
    "failed": "✖ failed",
    "denied": "⊘ denied",
}


def format_arguments(arguments: dict[str, Any], limit: int = 400) -> str:
    """Arguments as compact JSON, cut at `limit` characters so a huge call stays one card."""
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ToolCard(Vertical):
    """One tool call; set `state` and `result` and the card redraws."""

    state: reactive[str] = reactive("running")
    result: reactive[str] = reactive("")

    def __init__(self, call_id: str, name: str, arguments: dict[str, Any], *,
                 state: str = "running", result: str = "", error: str | None = None) -> None:
        super().__init__(classes="tool-card")
        self.call_id = call_id
        self.tool_name = name
        self.arguments = arguments
        self.parse_error = error
        self.set_reactive(ToolCard.state, state)
        self.set_reactive(ToolCard.result, result)

    def compose(self) -> ComposeResult:
        kind = "mcp tool" if "." in self.tool_name else "tool"  # MCP tools are server.tool
        yield Static(visible(f"{kind} · {self.tool_name}"), classes="tool-name", markup=False)
        yield Static(visible(format_arguments(self.arguments)), classes="tool-args", markup=False)
        yield Static("", classes="tool-state", markup=False)  # a parse error quotes the model
        yield Static("", classes="tool-result", markup=False)

    def on_mount(self) -> None:
        self._show_state(self.state)
        self._show_result(self.result)

    def validate_state(self, state: str) -> str:
        if state not in STATES:
            raise ValueError(f"unknown tool card state {state!r}; one of {', '.join(STATES)}")
        return state

    def watch_state(self, old: str, new: str) -> None:
        if self.is_mounted:
            self._show_state(new)

    def watch_result(self, result: str) -> None:
        if self.is_mounted:
            self._show_result(result)

    def _show_state(self, state: str) -> None:
        for s in STATES:
            self.set_class(s == state, f"-{s}")
        label = STATE_LABELS[state]
        if self.parse_error and state == "failed":
            label += f": {visible(self.parse_error)}"
        self.query_one(".tool-state", Static).update(label)

    def _show_result(self, result: str) -> None:
        box = self.query_one(".tool-result", Static)
        box.update(visible(result))  # a tool's output: a fetched page, a file, a server's text
        box.display = bool(result)
