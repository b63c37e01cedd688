"""Kitty picture ids as 256-colour indices (inside tmux, or a 256-colour terminal): the
id is the placeholder cells' foreground, so it must reach the terminal unchanged through
Textual's colour filter and Rich's 256-colour output."""

from __future__ import annotations

from rich.color import ColorSystem
from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME, MONOKAI
from textual.color import Color as TextualColor
from textual.filter import ANSIToTruecolor

from tui.widgets.terminal_picture import kitty_id_colour, next_kitty_id


def _sent(image_id: int, theme) -> str:
    """The SGR the app writes for a placeholder cell of `image_id`."""
    [segment] = ANSIToTruecolor(theme).apply(
        [Segment("x", Style(color=kitty_id_colour(image_id)))], TextualColor(0, 0, 0))
    return segment.style.render("x", color_system=ColorSystem.EIGHT_BIT)


def test_every_small_id_reaches_the_terminal_as_its_own_colour() -> None:
    ids = {next_kitty_id(small=True) for _ in range(600)}
    assert len(ids) > 200 and min(ids) >= 16 and max(ids) <= 255
    for theme in (MONOKAI, DEFAULT_TERMINAL_THEME):
        wrong = [i for i in ids if f"38;5;{i}m" not in _sent(i, theme)]
        assert wrong == [], "these ids would name another picture"


def test_greys_that_come_back_as_a_neighbour_are_never_used() -> None:
    assert "38;5;253m" in _sent(254, MONOKAI), "the colour path this guards against"
    assert 254 not in {next_kitty_id(small=True) for _ in range(600)}
