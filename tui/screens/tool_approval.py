"""Ask whether a tool call may run: y allows, a always allows (read-only tools, this
conversation), n or Esc denies. The tool loop in core waits on the answer."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from core.events import ToolCall
from tui.terminal_text import visible
from tui.widgets.tool_card import format_arguments


class ToolApprovalScreen(ModalScreen[str]):
    """Returns a core.tools Decision: "allow", "always" or "deny"."""

    BINDINGS = [
        Binding("y", "answer('allow')", "Allow"),
        Binding("a", "answer('always')", "Always allow"),
        Binding("n,escape", "answer('deny')", "Deny"),
    ]

    def __init__(self, call: ToolCall, *, can_always: bool, warning: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.call = call
        self.can_always = can_always
        self.warning = warning  # e.g. python without the sandbox's walls: full rights

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(visible(f"Allow the tool {self.call.name} to run?"), classes="dialog-text",
                         markup=False)
            if self.warning:
                yield Static(f"⚠ {self.warning}", classes="dialog-text", markup=False,
                             id="approval-warning")
            yield Static(visible(format_arguments(self.call.arguments, 600)), classes="dialog-hint",
                         markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Allow (y)", variant="primary", id="allow")
                if self.can_always:
                    yield Button("Always in this chat (a)", id="always")
                yield Button("Deny (n)", variant="error", id="deny")

    def on_mount(self) -> None:
        self.query_one("#deny", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "deny")

    def action_answer(self, decision: str) -> None:
        if decision == "always" and not self.can_always:
            decision = "allow"  # python and other side-effecting tools ask every time
        self.dismiss(decision)


async def ask(screen: Any, call: ToolCall) -> str:
    """Ask before a tool runs (the tool loop awaits this, through the chat screen): y allows,
    a always allows a read-only tool in this chat, n or Esc denies; a stopped turn closes
    the question."""
    import asyncio

    runtime = screen.runtime
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    dialog = ToolApprovalScreen(call, can_always=runtime.can_always_allow(call.name),
                                warning=runtime.tool_warning(call.name))
    screen.app.push_screen(dialog, lambda d: answer.done() or answer.set_result(d or "deny"))
    try:
        return await answer
    except asyncio.CancelledError:
        if dialog.is_attached:
            dialog.dismiss("deny")
        raise
