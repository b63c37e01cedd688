"""Which keys the footer shows, for a focus and a terminal width.

A pure function of the active bindings, kept apart from the screen that owns them so the
ranking and the fitting can be read (and tested) without a running app.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import ActiveBinding, Binding
from textual.screen import Screen
from textual.widget import Widget

from tui.widgets.composer import Composer

# Screen and app keys in the footer, most important first; a focused widget's own keys
# come before all of them. Past the width, the least important go first.
FOOTER_RANK = ("stop", "help", "new_chat", "pick_model", "quit", "search", "settings")
# While a message or the conversation list is focused, its own keys are what matters:
# of the screen's and app's keys only these stay.
FOOTER_IN_WIDGETS = frozenset({"stop", "help", "quit"})
PALETTE_KEY = "ctrl+p"


def _footer_width(binding: Binding, key_display: str) -> int:
    """Cells a footer key takes (Textual's FooterKey: padded key, description, space);
    grouped keys are counted as if alone, which over-estimates a little."""
    return len(key_display) + len(binding.description) + 3


def footer_bindings(bindings: dict[str, ActiveBinding], width: int,
                    key_display: Callable[[Binding], str], *, stoppable: bool) -> dict[str, ActiveBinding]:
    """The bindings the footer shows for this focus and width.

    Kept: the focused widget's shown keys first, then the screen's and app's by
    FOOTER_RANK (while a message or the list is focused, only FOOTER_IN_WIDGETS of
    them; Stop only while a reply streams or an edit is open). Past the width, the least important go
    first. The palette key and keys never shown pass through unchanged.
    """
    def widget_level(active: ActiveBinding) -> bool:
        return isinstance(active.node, Widget) and not isinstance(active.node, Screen)

    in_widget = any(b.binding.show and widget_level(b) and not isinstance(b.node, Composer)
                    for b in bindings.values())
    shown: list[tuple[int, str, ActiveBinding]] = []
    for key, active in bindings.items():
        binding = active.binding
        if key == PALETTE_KEY or not binding.show:
            continue
        if widget_level(active):
            shown.append((-1, key, active))
            continue
        action = binding.action.removeprefix("app.").removeprefix("screen.")
        if (in_widget and action not in FOOTER_IN_WIDGETS) or (action == "stop" and not stoppable):
            continue
        rank = FOOTER_RANK.index(action) if action in FOOTER_RANK else len(FOOTER_RANK)
        shown.append((rank, key, active))

    def cells(items: list[tuple[int, str, ActiveBinding]]) -> int:
        per_action: dict[object, int] = {}  # one footer key per action, as Textual's Footer does
        for _, _, a in items:
            group = a.binding.group  # a group shows its keys side by side and one description
            if group is not None:
                per_action[group] = per_action.get(group, len(group.description) + 3) + len(
                    key_display(a.binding))
            else:
                per_action.setdefault(a.binding.action, _footer_width(a.binding, key_display(a.binding)))
        return sum(per_action.values())

    palette = bindings.get(PALETTE_KEY)
    room = width - (cells([(0, PALETTE_KEY, palette)]) + 2 if palette is not None else 0)
    while shown and cells(shown) > room:
        dropped = shown.pop(max(range(len(shown)), key=lambda i: (shown[i][0], i)))[2].binding
        if dropped.group is not None:  # a group goes as a whole
            shown = [item for item in shown if item[2].binding.group is not dropped.group]
    keep = {key for _, key, _ in shown}
    return {key: active for key, active in bindings.items()
            if key in keep or key == PALETTE_KEY or not active.binding.show}
