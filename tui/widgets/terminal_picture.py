"""A picture drawn by the terminal itself (Kitty graphics, Sixel, iTerm2), in the same box
of cells as the half-block preview.

Kitty: the picture is sent once and shown through Unicode placeholder cells, ordinary text
to Textual, so it scrolls, crops and survives repaints like any text. Sixel and iTerm2 draw
pixels at the cursor: the picture is written after the last line of its box each time the
box is painted, and only while the whole box is on screen; a box cut by the edge of the
chat shows its half-block preview instead, so a picture never spills over other widgets.
"""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING

from rich.color import Color, ColorSystem
from rich.control import Control
from rich.segment import ControlType, Segment
from rich.style import Style
from rich.text import Text
from textual.errors import NoWidget
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Static

if TYPE_CHECKING:
    from tui.terminal_graphics import Graphics

# Ids under 2**24 fit the placeholder's colour alone (no third diacritic); a random start
# keeps two apps in one terminal from reusing each other's ids. Inside tmux, or where the
# app draws in 256 colours (TERM=xterm-kitty without COLORTERM, as over SSH), the id is a
# 256-colour index (16-255, less those that do not survive Textual's colour path): a 24-bit
# colour would be turned into the nearest of 256 (by Textual, or by tmux when the outer
# terminal is not known for RGB), changing the id.
_kitty_ids = itertools.count(random.randint(1, 2**23))
_NO_MOVE = ((ControlType.CURSOR_FORWARD, 0),)  # marks raw output as zero-width control


def write_to_terminal(app, data: str) -> None:
    """Raw bytes to the terminal, in order with Textual's frames (its writer thread).
    Textual has no public call for this; its own OSC 52 copy uses the driver the same way.
    A headless app (tests) has no terminal and writes nothing."""
    driver = getattr(app, "_driver", None)
    if driver is None or app.is_headless:
        return
    try:
        driver.write(data)
    except AssertionError:  # the driver has already left application mode (quitting)
        pass


def _survives_256_colours(index: int) -> bool:
    """Whether a 256-colour index reaches the terminal as itself. Textual turns every
    colour into RGB (its ANSI-to-truecolor filter) and Rich turns RGB back into the
    nearest of 256 for such a terminal; for 13 of the greys that is a neighbour (254
    comes out as 253), and the placeholder cells would name another picture."""
    rgb = Color.from_ansi(index).get_truecolor(foreground=True)
    return Color.from_triplet(rgb).downgrade(ColorSystem.EIGHT_BIT).number == index


_SMALL_IDS = tuple(i for i in range(16, 256) if _survives_256_colours(i))


def next_kitty_id(small: bool = False) -> int:
    n = next(_kitty_ids)
    return _SMALL_IDS[n % len(_SMALL_IDS)] if small else n % (2**24 - 1) + 1


def kitty_id_colour(image_id: int) -> Color:
    """The placeholder's foreground that names `image_id` (256-colour under 256)."""
    if image_id < 256:
        return Color.from_ansi(image_id)
    return Color.from_rgb((image_id >> 16) & 255, (image_id >> 8) & 255, image_id & 255)


class KittyPicture(Static):
    """Placeholder cells of a picture the terminal already holds under `image_id`."""

    def __init__(self, graphics: Graphics, image_id: int, sequences: list[str],
                 columns: int, rows: int) -> None:
        from tui.picture_codes import kitty_placeholder_rows

        text = Text("\n".join(kitty_placeholder_rows(columns, rows)),
                    style=Style(color=kitty_id_colour(image_id)),
                    no_wrap=True, overflow="crop")
        super().__init__(text, classes="image-preview image-picture", markup=False)
        self.graphics = graphics
        self.image_id = image_id
        self._sequences = sequences

    def on_mount(self) -> None:
        # Sent before this widget's first frame: the writer thread keeps the order.
        write_to_terminal(self.app, "".join(self.graphics.wrap(s) for s in self._sequences))

    def on_unmount(self) -> None:
        from tui.picture_codes import kitty_delete

        write_to_terminal(self.app, self.graphics.wrap(kitty_delete(self.image_id)))


class PixelPicture(Static):
    """A Sixel or iTerm2 picture over a blank box; its half-block preview when cut off."""

    def __init__(self, graphics: Graphics, sequence: str, preview: Text,
                 columns: int, rows: int) -> None:
        super().__init__(preview, classes="image-preview image-picture", markup=False)
        self.graphics = graphics
        self.sequence = sequence
        self.box = (columns, rows)

    def whole_box_shown(self, crop: Region) -> Region | None:
        """The box's place on screen when all of it is visible, else None."""
        if crop.size != self.size or self.size != self.box:
            return None
        try:
            shown = self.screen.find_widget(self).visible_region
        except (NoWidget, AttributeError):
            return None
        return shown if shown.size == self.size else None

    def render_lines(self, crop: Region) -> list[Strip]:
        shown = self.whole_box_shown(crop)
        if shown is None or not self.screen.is_active:
            return super().render_lines(crop)
        blank = Style(bgcolor=self.background_colors[1].rich_color)
        lines = [Strip.blank(crop.width, blank) for _ in range(crop.height - 1)]
        draw = ("\x1b7" + Control.move_to(shown.x, shown.y).segment.text
                + self.graphics.wrap(self.sequence) + "\x1b8")
        lines.append(Strip([Segment(" " * crop.width, blank),
                            Segment(draw, None, _NO_MOVE)], crop.width))
        return lines
