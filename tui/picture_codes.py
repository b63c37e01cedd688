"""Pictures in the terminal: half-block cells (two pixels a cell), Kitty, Sixel, iTerm2.

Terminal drawing is UI, so this lives in tui/ (it reads the stored copy core.vision
wrote, off the event loop). Half-block previews:

Every terminal that shows colour can draw `▀` with a foreground (the upper pixel) and a
background (the lower pixel), so this works through tmux, over SSH and in any emulator,
where Kitty, Sixel or iTerm2 graphics often do not (tmux drops them unless passthrough is
set). The result is plain data (rows of colour pairs); the UI turns it into styled text.
"""

from __future__ import annotations

import re
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


# Pictures for terminals that draw pixels. Each encoder returns the escape sequences as
# text; the UI writes them (wrapped for tmux where needed). The picture fills the same box
# of cells as the half-block preview, so the layout is the same whichever is drawn.

KITTY_PLACEHOLDER = "\U0010eeee"
# Kitty's row/column diacritics: the combining characters of class 230 that take part in
# no canonical composition, in code point order (the first 64: boxes stay under that).
KITTY_DIACRITICS = tuple(chr(c) for c in (
    0x0305, 0x030D, 0x030E, 0x0310, 0x0312, 0x033D, 0x033E, 0x033F, 0x0346, 0x034A, 0x034B,
    0x034C, 0x0350, 0x0351, 0x0352, 0x0357, 0x035B, 0x0363, 0x0364, 0x0365, 0x0366, 0x0367,
    0x0368, 0x0369, 0x036A, 0x036B, 0x036C, 0x036D, 0x036E, 0x036F, 0x0483, 0x0484, 0x0485,
    0x0486, 0x0487, 0x0592, 0x0593, 0x0594, 0x0595, 0x0597, 0x0598, 0x0599, 0x059C, 0x059D,
    0x059E, 0x059F, 0x05A0, 0x05A1, 0x05A8, 0x05A9, 0x05AB, 0x05AC, 0x05AF, 0x05C4, 0x0610,
    0x0611, 0x0612, 0x0613, 0x0614, 0x0615, 0x0616, 0x0617, 0x0657, 0x0658))
CELL_PX = (10, 20)  # a cell's pixels when the terminal does not say (VT340's)


def _scaled(path: str | Path, width: int, height: int):
    """The picture scaled to fit `width` x `height` pixels, aspect kept, as RGB."""
    from PIL import Image

    with Image.open(path) as img:
        rgb = img.convert("RGB")
    scale = min(width / max(1, rgb.width), height / max(1, rgb.height))
    size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
    return rgb.resize(size, Image.Resampling.LANCZOS)


def _png_base64(img) -> str:
    import base64
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.standard_b64encode(buf.getvalue()).decode("ascii")


def kitty_sequences(path: str | Path, image_id: int, columns: int, rows: int,
                    cell_px: tuple[int, int] | None = None) -> list[str]:
    """Kitty graphics: send the picture as PNG under `image_id` (in 4096-byte chunks) and
    make a virtual placement of `columns` x `rows` cells, which the placeholder cells of
    `kitty_placeholder_rows` then show wherever they are drawn (scrolled, cropped)."""
    cell_px = cell_px or CELL_PX
    data = _png_base64(_scaled(path, columns * cell_px[0], rows * cell_px[1]))
    chunks = [data[i:i + 4096] for i in range(0, len(data), 4096)] or [""]
    out = []
    for i, chunk in enumerate(chunks):
        more = 1 if i < len(chunks) - 1 else 0
        keys = f"a=t,f=100,i={image_id},q=2,m={more}" if i == 0 else f"m={more}"
        out.append(f"\x1b_G{keys};{chunk}\x1b\\")
    out.append(f"\x1b_Ga=p,U=1,i={image_id},c={columns},r={rows},q=2\x1b\\")
    return out


def kitty_delete(image_id: int) -> str:
    """Free the picture `image_id` and its placements in the terminal."""
    return f"\x1b_Ga=d,d=I,i={image_id},q=2\x1b\\"


def kitty_placeholder_rows(columns: int, rows: int) -> list[str]:
    """The text of each row of placeholder cells (row and column diacritics on each cell);
    the caller colours them with the image id (24 bits as the foreground RGB)."""
    columns = min(columns, len(KITTY_DIACRITICS))
    rows = min(rows, len(KITTY_DIACRITICS))
    return ["".join(KITTY_PLACEHOLDER + KITTY_DIACRITICS[r] + KITTY_DIACRITICS[c]
                    for c in range(columns)) for r in range(rows)]


def iterm_sequence(path: str | Path, columns: int, rows: int,
                   cell_px: tuple[int, int] | None = None) -> str:
    """iTerm2's inline image (OSC 1337), sized in cells so the terminal scales it into the
    box whatever its font size."""
    cell_px = cell_px or CELL_PX
    data = _png_base64(_scaled(path, columns * cell_px[0], rows * cell_px[1]))
    return (f"\x1b]1337;File=inline=1;size={len(data) * 3 // 4};width={columns};"
            f"height={rows};preserveAspectRatio=1:{data}\x07")


def sixel_sequence(path: str | Path, columns: int, rows: int,
                   cell_px: tuple[int, int] | None = None, colours: int = 256) -> str:
    """Sixel: the picture in at most `colours` colours (the registers most Sixel terminals
    have; a fast octree, as median cut took 0.4 s on a photo), fitting `columns` x `rows`
    cells of `cell_px` pixels (Sixel draws pixels, so a wrong cell size draws it smaller or
    larger: the caller passes the size the terminal reports)."""
    import numpy as np
    from PIL import Image

    cell_px = cell_px or CELL_PX
    img = _scaled(path, columns * cell_px[0], rows * cell_px[1])
    indexed = img.quantize(colors=colours, method=Image.Quantize.FASTOCTREE)
    palette = indexed.getpalette() or []
    pixels = np.asarray(indexed, dtype=np.int32)
    height, width = pixels.shape
    out = [f'\x1bP0;1;0q"1;1;{width};{height}']
    used = sorted(set(np.unique(pixels).tolist()))
    for index in used:
        r, g, b = palette[3 * index:3 * index + 3]
        out.append(f"#{index};2;{r * 100 // 255};{g * 100 // 255};{b * 100 // 255}")
    weights = np.broadcast_to((1 << np.arange(6, dtype=np.int64))[:, None], (6, width))
    columns_at = np.broadcast_to(np.arange(width, dtype=np.int64), (6, width))
    count = len(palette) // 3 or 256
    for top in range(0, height, 6):
        band = pixels[top:top + 6]
        n = band.shape[0]
        # One pass per band: each (colour, column) sums the bits of its rows.
        bits = np.bincount((band * width + columns_at[:n]).ravel(),
                           weights=weights[:n].ravel(), minlength=count * width)
        bits = bits.reshape(-1, width).astype(np.uint8)
        lines = []
        for index in np.flatnonzero(bits.any(axis=1)).tolist():
            sixels = (bits[index] + 63).tobytes().decode("ascii").rstrip("?")
            lines.append(f"#{index}" + _run_length(sixels))
        out.append("$".join(lines) + "-")
    out.append("\x1b\\")
    return "".join(out)


_RUN = re.compile(r"(.)\1{3,}")


def _run_length(sixels: str) -> str:
    """Sixel's repeat introducer for runs longer than three (`!<n><char>`)."""
    return _RUN.sub(lambda m: f"!{len(m.group())}{m.group(1)}", sixels)
