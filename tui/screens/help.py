"""The help screen: every key binding, generated from the bindings themselves, so it can
never drift from what the keys really do."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tui.widgets.quiet_footer import QuietFooter


def _keys(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    names = {"left_square_bracket": "[", "right_square_bracket": "]", "escape": "esc"}
    return " / ".join(names.get(k, k) for k in binding.key.split(","))


def binding_rows(groups: list[tuple[str, list[BindingType]]]) -> list[tuple[str, str, str]]:
    """(where, keys, what) for every binding that has a description."""
    rows: list[tuple[str, str, str]] = []
    for where, bindings in groups:
        for b in bindings:
            if isinstance(b, Binding) and b.description:
                rows.append((where, _keys(b), b.description))
    return rows


def help_groups(app: type[App], main: type[Screen]) -> list[tuple[str, list[BindingType]]]:
    """The binding tables of the app, in the order a person meets them.

    The app and the main screen hand in their own classes (the main screen opens this one),
    so this module never imports them back.
    """
    from tui.screens.settings import SettingsScreen
    from tui.widgets.composer import Composer
    from tui.widgets.message_view import MessageView
    from tui.widgets.sidebar import ConversationList

    return [
        ("Anywhere", list(app.BINDINGS)),
        ("Main screen", list(main.BINDINGS)),
        ("Composer", list(Composer.BINDINGS)),
        ("Message (focused)", list(MessageView.BINDINGS)),
        ("Conversation list", list(ConversationList.BINDINGS)),
        ("Settings", list(SettingsScreen.BINDINGS)),
    ]


class HelpScreen(ModalScreen[None]):
    """Lists every binding; Esc, q or f1 closes it."""

    DEFAULT_CLASSES = "dialog-screen"

    BINDINGS = [Binding("escape,q,f1", "dismiss_help", "Close")]

    def __init__(self, groups: list[tuple[str, list[BindingType]]]) -> None:
        super().__init__()
        self.groups = groups

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, pad_edge=False, show_header=True,
                      header_style="bold")
        table.add_column("Where", no_wrap=True, style="dim")
        table.add_column("Keys", no_wrap=True, style="bold")
        table.add_column("Action")
        last = ""
        for where, keys, what in binding_rows(self.groups):
            table.add_row(where if where != last else "", keys, what)
            last = where
        with VerticalScroll(classes="help"):
            yield Static(Text("Keys  (esc closes)", style="bold"), classes="help-title")
            yield Static(table)
            yield Static("Slash commands in the composer: /model /system /clear /export /attach "
                         "(tab completes).", classes="help-foot")
        yield QuietFooter()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
