"""The bytes the real app writes to a real terminal (a pty) when a picture is attached:
with LLMDECK_GRAPHICS=kitty they carry Kitty graphics (`ESC _G`, then placeholder cells),
with sixel a Sixel image (`ESC P ... q`), and with halfblock neither, only `▀` cells.
Real Textual with its Linux driver, the scripted engine in a worker, a real PNG."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.images import make_image
from tests.helpers import pty_app
from tests.helpers.pty_app import CLI, ROOT, scripted_home
from tests.helpers.sgr import foreground_at
from tests.helpers.tmux_client import RealTmux

PLACEHOLDER = "\U0010eeee".encode()
FIRST_FRAME = b"scripted:latest"  # the service's model, in the header
# A terminal the environment does not name.
UNNAMED = ("TMUX", "KITTY_WINDOW_ID", "TERM_PROGRAM", "LC_TERMINAL", "COLORTERM",
           "ITERM_SESSION_ID", "WEZTERM_PANE", "GHOSTTY_RESOURCES_DIR", "KONSOLE_VERSION")


class PtyApp(pty_app.PtyApp):
    """The `llmdeck` command on a pty, the client of its home's service (the scripted
    engine), drawing pictures in `graphics` (auto: as the terminal answers)."""

    def __init__(self, graphics: str | None, columns: int = 120, rows: int = 40) -> None:
        env: dict[str, str | None] = {name: None for name in UNNAMED}
        scripted_home(Path(os.environ["LLMDECK_HOME"]))
        super().__init__({**env, "LLMDECK_GRAPHICS": graphics or "auto"}, columns, rows,
                         launch=CLI)


@pytest.mark.slow
@pytest.mark.parametrize("graphics", ["kitty", "sixel", "halfblock"])
def test_the_terminal_gets_the_picture_in_the_chosen_protocol(tmp_path: Path,
                                                              graphics: str) -> None:
    photo = make_image(tmp_path / "harbour.png", 96, 64)
    app = PtyApp(graphics)
    try:
        app.read_until(lambda out: FIRST_FRAME in out, 60, "the first frame")
        app.type_line(f"/attach {photo}")
        # The card's label; its half-block preview may be replaced by the picture before
        # a frame shows it, so only the halfblock case waits for `▀`.
        app.read_until(lambda out: b"Image: harbour.png" in out, 60, "the image card")
        if graphics == "kitty":
            out = app.read_until(lambda out: PLACEHOLDER in out, 60, "placeholder cells")
            sent = out[out.index(b"\x1b_Ga=t,f=100,"):]
            assert sent.index(b"\x1b_Ga=p,U=1,") < sent.index(PLACEHOLDER), (
                "the picture reaches the terminal before the cells that show it")
            assert b"\x1bP0;1;0q" not in out
            # TERM=xterm-256color: the app draws 256 colours, so the id is an index (38;5;N)
            cells = out[:out.index(PLACEHOLDER)]
            assert re.search(rb"\x1b\[38;5;\d+(;[\d;]*)?m$", cells[-30:]), cells[-30:]
        elif graphics == "sixel":
            start = b"\x1bP0;1;0q"
            out = app.read_until(lambda out: start in out and b"\x1b\\" in out.split(start)[1],
                                 60, "a whole Sixel image")
            sixel = out[out.index(start):]
            assert sixel.startswith(start + b'"1;1;')  # the raster size follows the intro
            assert b"\x1b_G" not in out
        else:
            # A second attach round-trip gives the first card's thread (which would have
            # sent its picture a few ms after the preview) ample time to have done so.
            app.read_until(lambda out: "▀".encode() in out, 60, "the half-block preview")
            second = make_image(tmp_path / "second.png", 64, 64)
            app.type_line(f"/attach {second}")
            app.read_until(lambda out: b"second.png" in out, 60, "the second card")
            assert b"\x1b_G" not in app.output and b"\x1bP0;1;0q" not in app.output
            assert PLACEHOLDER not in app.output
    finally:
        app.close()


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "drawn"), [
    (b"\x1b[?62;4;22c", b"\x1bP0;1;0q"),  # DA1 with attribute 4: Sixel
    (b"\x1b_Gi=31;OK\x1b\\\x1b[?62;22c", "\U0010eeee".encode()),  # Kitty said OK
])
def test_the_terminals_answers_choose_the_protocol_and_never_become_keys(
        tmp_path: Path, answer: bytes, drawn: bytes) -> None:
    photo = make_image(tmp_path / "harbour.png", 96, 64)
    app = PtyApp(None)
    try:
        app.read_until(lambda out: FIRST_FRAME in out, 60, "the first frame")
        assert b"\x1b[c" not in app.output  # nothing is asked at start
        app.type_line(f"/attach {photo}")
        app.read_until(lambda out: b"\x1b_Gi=31," in out and b"\x1b[c" in out, 60,
                       "the Kitty query and DA1, when the first picture is shown")
        half = len(answer) // 2  # split in two reads, mid-sequence, as a slow link does
        os.write(app.master, answer[:half])
        time.sleep(0.05)  # two reads, not a wait for a result (the app waits up to 1 s)
        os.write(app.master, answer[half:] + b"zq")
        app.read_until(lambda out: drawn in out, 60, "the picture in the answered protocol")
        app.read_until(lambda out: b"zq" in out, 30, "the keys typed after the answer")
        # What the app drew, less the pictures' own data: no answer may show as typed text.
        shown = re.sub(rb"\x1b[P_].*?\x1b\\", b"", app.output, flags=re.S).decode(
            errors="replace")
        assert "?62;" not in shown and "31;OK" not in shown, "an answer was typed as keys"
    finally:
        app.close()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("passthrough", [True, False])
def test_through_real_tmux_kitty_pictures_pass_only_with_allow_passthrough(
        tmp_path: Path, passthrough: bool) -> None:
    """kitty outside, tmux between (its own server, client in our pty): with passthrough on
    the picture, its placement and the placeholder cells (id as a 256-colour index) reach
    the outer terminal; with it off the app draws half-blocks and sends no graphics."""
    photo = make_image(tmp_path / "harbour.png", 96, 64)
    script = tmp_path / "run.sh"
    scripted_home(Path(os.environ["LLMDECK_HOME"]))
    script.write_text(f"cd {ROOT} && KITTY_WINDOW_ID=1 LLMDECK_GRAPHICS=auto "
                      f"{shlex.quote(sys.executable)} -c {shlex.quote(CLI)}\nsleep 30\n")
    tmux = RealTmux(tmp_path, passthrough, f"sh {script}")
    try:
        assert tmux.read_until(FIRST_FRAME, 60), "the app's first frame"
        tmux.type_line(f"/attach {photo}")
        assert tmux.read_until(b"harbour.png", 60), "the image card"
        if passthrough:
            assert tmux.read_until(PLACEHOLDER, 60), "placeholder cells"
            placed = re.search(rb"\x1b_Ga=p,U=1,i=(\d+),c=36,r=12", tmux.output)
            assert placed and b"\x1b_Ga=t,f=100," in tmux.output  # unwrapped by tmux
            first = tmux.output.find(PLACEHOLDER)  # its colour names the picture
            assert foreground_at(tmux.output, first) == int(placed.group(1))
        else:
            assert tmux.read_until("▀".encode(), 60), "the half-block preview"
            tmux.type_line(f"/attach {make_image(tmp_path / 'second.png', 64, 64)}")
            assert tmux.read_until(b"second.png", 60), "a second card"
            assert b"\x1b_G" not in tmux.output and PLACEHOLDER not in tmux.output
    finally:
        tmux.close()
