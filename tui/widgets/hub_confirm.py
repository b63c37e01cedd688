"""Yes/no before something that cannot be undone (deleting a model's files)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Label

from tui.terminal_text import visible


class ConfirmDialog(ModalScreen[bool]):
    """Dismisses with True on y, False on n or Esc."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes, delete"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__(classes="hub-confirm")
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(visible(self.question), id="confirm-question", markup=False)
            if self.detail:
                yield Label(visible(self.detail), id="confirm-detail", markup=False)
            yield Label("y = yes · n / Esc = no", id="confirm-keys")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
