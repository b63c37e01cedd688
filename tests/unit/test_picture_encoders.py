"""The terminal picture encoders of tui.picture_codes, read back: a Sixel image decoded
by a small reader here lands each colour where the test picture has it (green top-left,
red top, blue bottom); Kitty's PNG chunks reassemble to the picture at the asked size;
iTerm2's inline image names its cell box; placeholder rows carry row/column marks."""

from __future__ import annotations

import base64
import io
import random
import re
from pathlib import Path

from PIL import Image

from tests.fixtures.images import BLUE, GREEN, RED, make_image
from tui.picture_codes import (
    iterm_sequence,
    kitty_delete,
    kitty_placeholder_rows,
    kitty_sequences,
    sixel_sequence,
)


def decode_sixel(data: str) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(x, y) -> RGB of every pixel a Sixel string sets (palette in percent, RLE, $ and -)."""
    body = data[data.index("q") + 1:data.rindex("\x1b\\")]
    palette: dict[int, tuple[int, int, int]] = {}
    pixels: dict[tuple[int, int], tuple[int, int, int]] = {}
    x = top = colour = 0
    for token in re.finditer(r'"[\d;]*|#(\d+)(?:;2;(\d+);(\d+);(\d+))?|!(\d+)(.)|([?-~])|\$|-',
                             body):
        text = token.group(0)
        if text.startswith('"'):
            continue
        if token.group(1) is not None:
            colour = int(token.group(1))
            if token.group(2) is not None:
                palette[colour] = tuple(round(int(token.group(i)) * 255 / 100) for i in (2, 3, 4))
            continue
        if text == "$":
            x = 0
        elif text == "-":
            x, top = 0, top + 6
        else:
            count, char = (int(token.group(5)), token.group(6)) if token.group(5) else (1, text)
            bits = ord(char) - 63
            for _ in range(count):
                for row in range(6):
                    if bits >> row & 1:
                        pixels[(x, top + row)] = palette[colour]
                x += 1
    return pixels


def near(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return all(abs(p - q) <= 12 for p, q in zip(a, b, strict=True))


def test_sixel_puts_each_colour_where_the_picture_has_it(tmp_path: Path) -> None:
    photo = make_image(tmp_path / "p.png", 64, 48)
    data = sixel_sequence(photo, 8, 3, cell_px=(10, 20))  # a box of 80 x 60 pixels
    assert data.startswith('\x1bP0;1;0q"1;1;80;60') and data.endswith("\x1b\\")
    pixels = decode_sixel(data)
    assert len(pixels) == 80 * 60  # every pixel set once
    assert near(pixels[(3, 3)], GREEN) and near(pixels[(70, 10)], RED)
    assert near(pixels[(40, 50)], BLUE) and near(pixels[(3, 55)], BLUE)


def test_kitty_chunks_reassemble_to_the_picture_and_place_it_in_cells(tmp_path: Path) -> None:
    photo = make_image(tmp_path / "p.png", 640, 480)
    with Image.open(photo) as img:  # noise in the middle, so the PNG needs several chunks
        img.paste(Image.frombytes("RGB", (400, 100), random.randbytes(400 * 100 * 3)),
                  (120, 150))
        img.save(photo)
    seqs = kitty_sequences(photo, 4242, 40, 12, cell_px=(20, 40))  # 800 x 480 px box
    assert seqs[0].startswith("\x1b_Ga=t,f=100,i=4242,q=2,m=1;") and len(seqs) > 3
    assert all(s.startswith("\x1b_Gm=") for s in seqs[1:-1]) and seqs[-2].startswith(
        "\x1b_Gm=0;")
    assert seqs[-1] == "\x1b_Ga=p,U=1,i=4242,c=40,r=12,q=2\x1b\\"
    assert all(len(s) <= 4096 + 40 for s in seqs)
    payload = "".join(s.split(";", 1)[1][:-2] for s in seqs[:-1])
    img = Image.open(io.BytesIO(base64.b64decode(payload)))
    assert img.size == (640, 480)  # fits 800 x 480 with the aspect kept
    assert near(img.getpixel((5, 5)), GREEN) and near(img.getpixel((600, 400)), BLUE)
    assert kitty_delete(4242) == "\x1b_Ga=d,d=I,i=4242,q=2\x1b\\"


def test_kitty_placeholder_rows_mark_every_cell_with_its_row_and_column() -> None:
    rows = kitty_placeholder_rows(3, 2)
    assert len(rows) == 2 and all(len(r) == 9 for r in rows)
    assert rows[0][1] == rows[0][4] == "\u0305" and rows[1][1] == "\u030d"  # row marks
    assert [rows[1][i] for i in (2, 5, 8)] == ["\u0305", "\u030d", "\u030e"]  # columns


def test_iterm_inline_image_is_sized_in_cells(tmp_path: Path) -> None:
    photo = make_image(tmp_path / "p.png", 64, 48)
    data = iterm_sequence(photo, 30, 11)
    assert data.startswith("\x1b]1337;File=inline=1;") and data.endswith("\x07")
    assert ";width=30;height=11;preserveAspectRatio=1:" in data
    png = base64.b64decode(data.split(":", 1)[1][:-1])
    assert Image.open(io.BytesIO(png)).format == "PNG"
