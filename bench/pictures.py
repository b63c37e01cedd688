"""Benchmark terminal pictures: what the graphics path costs to import and to encode, ours
against textual-image (the peer the issue names), in the same run.

Prints one JSON object.
- import: a fresh Python that has already imported Textual imports our graphics path
  (tui.terminal_graphics, tui.terminal_answers, tui.widgets.terminal_picture) or
  textual-image's widgets, once with stdout a pipe and once in a pty whose far end never
  answers (a terminal that ignores queries: textual-image asks at import and waits for
  the answers; ours asks nothing at import). Median of N, in ms.
- encode: a 1024x768 photo-like picture (gradients and noise) into Sixel for a 36x12
  cell box of 10x20 px, ours (core.vision.sixel_sequence, 256 colours) and textual-image's
  image_to_sixels on the same scaled picture; and ours into Kitty (PNG chunks) and half-
  blocks. `sixel_speed_ratio` = theirs / ours (higher is better for us).

Run: .venv/bin/python bench/pictures.py --quick
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OURS = "tui.terminal_graphics, tui.terminal_answers, tui.widgets.terminal_picture"
THEIRS = "textual_image.widget"
PROBE = ("import time, textual.app, textual.widgets; t = time.perf_counter(); import {mods}; "
         "print('MS', (time.perf_counter() - t) * 1000, flush=True)")


def _import_ms(mods: str, in_pty: bool) -> float:
    code = PROBE.format(mods=mods)
    if not in_pty:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return float(out.split("MS")[1])
    master, slave = pty.openpty()
    # 120x40 cells, pixel size unknown (0): textual-image 0.12 divides by the column count
    # at import and fails on a pty left at 0x0.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=slave, stdout=slave,
                            stderr=slave)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + 60
    while not (b"MS" in data and b"\n" in data.split(b"MS", 1)[1]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no timing from the import probe: {data[-300:]!r}")
        if select.select([master], [], [], 0.5)[0]:
            try:
                data += os.read(master, 65536)
            except OSError:  # the probe exited and closed its end
                break
    proc.wait(30)
    os.close(master)
    return float(data.split(b"MS")[1].split()[0])


def _photo(path: Path) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:768, 0:1024]
    rgb = np.stack([x * 255 // 1023, y * 255 // 767, (x + y) * 255 // 1790], axis=-1)
    rgb = np.clip(rgb + rng.integers(-40, 40, rgb.shape), 0, 255).astype("uint8")
    Image.fromarray(rgb, "RGB").save(path)
    return path


def _timed(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (CPU, seconds)")
    args = parser.parse_args()
    runs = 3 if args.quick else 9

    from textual_image._sixel import image_to_sixels

    from core import vision

    out: dict[str, object] = {}
    for name, mods in (("ours", OURS), ("textual_image", THEIRS)):
        out[f"{name}_import_pipe_p50_ms"] = round(statistics.median(
            _import_ms(mods, False) for _ in range(runs)), 1)
        out[f"{name}_import_silent_pty_p50_ms"] = round(statistics.median(
            _import_ms(mods, True) for _ in range(runs)), 1)

    with tempfile.TemporaryDirectory() as tmp:
        photo = _photo(Path(tmp) / "photo.png")
        cell = (10, 20)
        ours = _timed(lambda: vision.sixel_sequence(photo, 36, 12, cell), runs)

        def theirs() -> str:  # the same work: open, fit 360x240 (aspect kept), encode
            from PIL import Image

            with Image.open(photo) as img:
                rgb = img.convert("RGB")
            scale = min(360 / rgb.width, 240 / rgb.height)
            size = (round(rgb.width * scale), round(rgb.height * scale))
            return image_to_sixels(rgb.resize(size, Image.Resampling.LANCZOS))

        theirs_ms = _timed(theirs, runs)
        out.update({
            "sixel_ours_p50_ms": round(ours, 1),
            "sixel_textual_image_p50_ms": round(theirs_ms, 1),
            "sixel_speed_ratio": round(theirs_ms / ours, 2),
            "sixel_ours_bytes": len(vision.sixel_sequence(photo, 36, 12, cell)),
            "sixel_textual_image_bytes": len(theirs()),
            "kitty_ours_p50_ms": round(_timed(
                lambda: vision.kitty_sequences(photo, 7, 36, 12, cell), runs), 1),
            "halfblock_ours_p50_ms": round(_timed(
                lambda: vision.half_block_cells(photo, 40, 12), runs), 1),
            "runs": runs,
        })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
