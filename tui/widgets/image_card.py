"""An attached image in the chat: its name, size and dimensions, and the picture.

Where the terminal draws pictures (tui.terminal_graphics: Kitty, Sixel, iTerm2) the card
shows the real picture (tui.widgets.terminal_picture); elsewhere, and until it is ready, a
half-block preview drawn with `▀` cells (two pixels a cell, colours from tui.picture_codes),
which every colour terminal shows, tmux and SSH included. Both fill the same box of cells.
The picture is read, and the terminal's graphics decided, in a thread when the card
mounts, so a large chat opens without waiting on the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

if TYPE_CHECKING:
    from core.wire.vision import StoredImage

PREVIEW_COLUMNS = 40  # at most; fewer on a narrow terminal
PREVIEW_ROWS = 12


def half_block_text(cells: list[list[tuple[tuple[int, int, int], tuple[int, int, int]]]]) -> Text:
    """Rows of (upper, lower) colours as styled `▀` text."""
    text = Text(no_wrap=True, overflow="crop")
    for i, row in enumerate(cells):
        if i:
            text.append("\n")
        for top, bottom in row:
            text.append("▀", Style(color=Color.from_rgb(*top), bgcolor=Color.from_rgb(*bottom)))
    return text


class ImageCard(Vertical):
    """One attached image, shown where it was attached in the conversation."""

    def __init__(self, alias: str, image: StoredImage, created_at: float = 0.0) -> None:
        super().__init__(classes="image-card")
        self.alias = alias
        self.image = image
        self.created_at = created_at

    def compose(self) -> ComposeResult:
        label = self.image.label if self.alias == self.image.name else (
            f"{self.alias} · {self.image.label.split(' · ', 1)[1]}")
        yield Static(f"Image: {label}", classes="image-label", markup=False)
        yield Static("", classes="image-preview")

    def on_mount(self) -> None:
        width = self.app.size.width
        columns = max(8, min(PREVIEW_COLUMNS, width - 12))
        self.run_worker(lambda: self._cells(columns), thread=True, exit_on_error=False)

    def _cells(self, columns: int) -> None:
        from tui import terminal_graphics
        from tui.picture_codes import half_block_cells

        try:
            cells = half_block_cells(self.image.path, columns, PREVIEW_ROWS)
        except OSError:
            self.app.call_from_thread(self._show, Text("(the stored picture is gone)"))
            return
        preview = half_block_text(cells)
        self.app.call_from_thread(self._show, preview)  # at once; the picture follows
        graphics = terminal_graphics.current(headless=self.app.is_headless,
                                             ask=self._asker())
        if graphics.protocol == "halfblock" or not cells:
            return
        try:
            picture = _picture(graphics, self.image.path, preview, len(cells[0]), len(cells),
                               self.app.console.color_system)
        except OSError:
            return  # gone since the preview was read: the preview stays
        if picture is not None:
            self.app.call_from_thread(self._show_picture, picture)

    def _asker(self) -> Callable[[], str] | None:
        """How to ask the terminal what it draws, where the app's input can take answers."""
        from tui import terminal_answers
        from tui.widgets.terminal_picture import write_to_terminal

        if not terminal_answers.installed():
            return None
        return partial(terminal_answers.ask, partial(write_to_terminal, self.app))

    def _show(self, text: Text) -> None:
        if self.is_attached:
            self.query_one(".image-preview", Static).update(text)

    async def _show_picture(self, make_picture: Callable[[], Static]) -> None:
        if not self.is_attached:
            return
        old = self.query_one(".image-preview", Static)
        await self.mount(make_picture(), after=old)
        await old.remove()


def _picture(graphics, path, preview: Text, columns: int, rows: int,
             colours: str | None) -> Callable[[], Static] | None:
    """What makes the widget that draws `path` with `graphics` in `columns` x `rows` cells,
    or None where it cannot (Kitty's placeholder cells name their picture by colour, which
    a 16-colour terminal cannot carry). Encoding (tens of milliseconds) happens here, in
    the card's thread; the widget itself is made on the app's loop."""
    from tui import picture_codes as vision
    from tui import terminal_graphics
    from tui.widgets.terminal_picture import KittyPicture, PixelPicture, next_kitty_id

    cell = terminal_graphics.cell_pixels()
    if graphics.protocol == "kitty":
        if colours not in ("truecolor", "256"):
            return None
        image_id = next_kitty_id(small=graphics.tmux or colours != "truecolor")
        sequences = vision.kitty_sequences(path, image_id, columns, rows, cell)
        return partial(KittyPicture, graphics, image_id, sequences, columns, rows)
    if graphics.protocol == "sixel":
        sequence = vision.sixel_sequence(path, columns, rows, cell)
    else:
        sequence = vision.iterm_sequence(path, columns, rows, cell)
    return partial(PixelPicture, graphics, sequence, preview, columns, rows)


async def place_images(chat, images, messages, *, has_older: bool, has_newer: bool) -> None:
    """Mount the cards of `images` among the page of `messages` the chat view shows, each
    before the first message sent after it was attached. An image that belongs to a page
    not shown (older or newer) waits for that page."""
    views = {v.message_id: v for v in chat.views if v.message_id}
    for attached in images:
        later = next((m for m in messages if m.created_at > attached.created_at), None)
        card = ImageCard(attached.alias, attached.image, attached.created_at)
        if later is not None and later.id in views:
            if has_older and later is messages[0]:
                continue  # attached before this page starts
            await chat.mount(card, before=views[later.id])
        elif not has_newer:
            for hint in chat.query(".empty-hint"):
                await hint.remove()
            await chat.mount(card)


async def show_tool_images(card, runtime, conversation_id: str | None, paths) -> None:
    """Mount, inside a tool card, the cards of the images that call attached (an MCP image
    result; the turn made them attachments before the card's last state arrived)."""
    wanted = set(paths)
    for attached in await runtime.images(conversation_id):
        if attached.image.path in wanted and not any(
                c.alias == attached.alias for c in card.query(ImageCard)):
            await card.mount(ImageCard(attached.alias, attached.image, attached.created_at))
