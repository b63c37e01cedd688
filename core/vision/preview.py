"""Half-block previews: an image as terminal cells, two pixels per cell.

Every terminal that shows colour can draw `▀` with a foreground (the upper pixel) and a
background (the lower pixel), so this works through tmux, over SSH and in any emulator,
where Kitty, Sixel or iTerm2 graphics often do not (tmux drops them unless passthrough is
set). The result is plain data (rows of colour pairs); the UI turns it into styled text.
"""

from __future__ import annotations

from pathlib import Path

RGB = tuple[int, int, int]


def half_block_cells(path: str | Path, columns: int, max_rows: int) -> list[list[tuple[RGB, RGB]]]:
    """Rows of (upper, lower) colours fitting `columns` x `max_rows` cells, aspect kept.

    A terminal cell is about twice as tall as wide, so one cell holds two square pixels
    stacked: an image W x H pixels becomes W columns by H/2 rows.
    """
    from PIL import Image

    with Image.open(path) as img:
        rgb = img.convert("RGB")
    width = max(1, columns)
    height = max(2, round(rgb.height * width / max(1, rgb.width)))
    if height > 2 * max_rows:  # too tall: fit the height instead
        height = 2 * max_rows
        width = max(1, round(rgb.width * height / max(1, rgb.height)))
    height += height % 2
    small = rgb.resize((width, height), Image.Resampling.BOX)
    pixels = small.load()
    return [
        [(pixels[x, y], pixels[x, y + 1]) for x in range(width)]
        for y in range(0, height, 2)
    ]
