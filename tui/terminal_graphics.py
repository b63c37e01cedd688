"""Which pictures this terminal can draw: Kitty graphics, Sixel, iTerm2 inline images, or
only half-block cells.

Decided from the environment (LLMDECK_GRAPHICS first, then what terminals set: TERM,
TERM_PROGRAM, LC_TERMINAL, KITTY_WINDOW_ID, ...) and, inside tmux, from tmux's own
`allow-passthrough` option: tmux drops every graphics sequence unless it is on, and then
each one must be wrapped in tmux's DCS passthrough. `parse_answers` reads a terminal's
answers to the Kitty graphics query and DA1 (Sixel is attribute 4), asked through
tui.terminal_answers while the app runs, or by `ask_terminal` on a terminal nobody else
reads. Detection runs once, in a thread, when the first picture is shown: never on the
first frame. Half-block is the answer whenever anything is unsure: it works everywhere.
"""

from __future__ import annotations

import logging
import os
import re
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

GRAPHICS_ENV = "LLMDECK_GRAPHICS"
PROTOCOLS = ("kitty", "sixel", "iterm", "halfblock")

KITTY_QUERY = "\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\"
DA1_QUERY = "\x1b[c"
_KITTY_ANSWER = re.compile(rb"\x1b_Gi=31;([^\x1b]*)\x1b\\")
_DA1_ANSWER = re.compile(rb"\x1b\[\?([\d;]*)c")


@dataclass(frozen=True)
class Graphics:
    """The protocol pictures are drawn with, and why it was chosen."""

    protocol: str  # one of PROTOCOLS
    tmux: bool = False  # wrap each sequence in tmux's passthrough
    reason: str = ""

    def wrap(self, sequence: str) -> str:
        """`sequence` as it must be written: inside tmux, in a passthrough DCS whose inner
        escapes are doubled; elsewhere unchanged."""
        if not self.tmux:
            return sequence
        return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"


HALFBLOCK = Graphics("halfblock", reason="default")


def outer_terminal(env: Mapping[str, str]) -> str | None:
    """The protocol the terminal named by `env` draws best, or None when env says nothing.

    Kitty and Ghostty draw Kitty graphics with Unicode placeholders (cells that scroll and
    crop like text); iTerm2 and WezTerm take iTerm2 inline images (WezTerm's Kitty support
    lacks placeholders); foot, Konsole, mlterm and Contour draw Sixel. Over SSH TERM and
    (by default) LC_TERMINAL travel along, so kitty and iTerm2 are still recognised there.
    """
    term = env.get("TERM", "")
    program = env.get("TERM_PROGRAM", "").lower()
    if env.get("KITTY_WINDOW_ID") or term == "xterm-kitty":
        return "kitty"
    if term == "xterm-ghostty" or program == "ghostty" or env.get("GHOSTTY_RESOURCES_DIR"):
        return "kitty"
    if program in ("iterm.app", "wezterm") or env.get("LC_TERMINAL") == "iTerm2" or (
            env.get("ITERM_SESSION_ID") or env.get("WEZTERM_PANE")):
        return "iterm"
    if term.startswith(("foot", "mlterm", "contour")) or env.get("KONSOLE_VERSION"):
        return "sixel"
    return None


def choose(env: Mapping[str, str], *, tmux_passthrough: bool | None,
           answers: set[str] | None = None, client_term: str = "") -> Graphics:
    """The graphics to use, given the environment, whether tmux lets sequences through
    (None: not asked / not in tmux), what the terminal answered to queries, if asked, and
    inside tmux the TERM of the terminal tmux's client runs in (`client_term`)."""
    in_tmux = bool(env.get("TMUX"))
    forced = env.get(GRAPHICS_ENV, "auto").strip().lower() or "auto"
    if forced in PROTOCOLS:
        return Graphics(forced, tmux=in_tmux and forced != "halfblock",
                        reason=f"{GRAPHICS_ENV}={forced}")
    if forced != "auto":
        log.warning("%s=%r is not one of %s or auto: pictures are drawn as half-blocks",
                    GRAPHICS_ENV, forced, ", ".join(PROTOCOLS))
        return Graphics("halfblock", reason=f"{GRAPHICS_ENV}={forced!r} is not understood")
    if in_tmux and not tmux_passthrough:
        return Graphics("halfblock", reason="tmux without allow-passthrough")
    found = outer_terminal(env)
    if found is None and client_term:
        found = outer_terminal({"TERM": client_term})
    if found is None and answers:
        found = "kitty" if "kitty" in answers else "sixel" if "sixel" in answers else None
    if found is None:
        return Graphics("halfblock", reason="the terminal named no graphics protocol")
    return Graphics(found, tmux=in_tmux, reason="tmux passthrough" if in_tmux else "terminal")


def tmux_facts(env: Mapping[str, str], timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the tmux pane this process runs in lets sequences through
    (`allow-passthrough` on or `all`, the pane's own value if set), and the TERM of the
    terminal its client runs in ("" when none is attached)."""
    tmux = shutil.which("tmux")
    if tmux is None or not env.get("TMUX"):
        return False, ""
    target = ["-t", env["TMUX_PANE"]] if env.get("TMUX_PANE") else []
    try:
        out = subprocess.run(
            [tmux, "display-message", "-p", *target, "#{allow-passthrough}|#{client_termname}"],
            capture_output=True, text=True, timeout=timeout, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return False, ""
    if out.returncode != 0:
        return False, ""
    passthrough, _, client_term = out.stdout.strip().partition("|")
    return passthrough in ("1", "on", "all"), client_term


def parse_answers(data: bytes) -> set[str]:
    """What a terminal's answers to KITTY_QUERY + DA1_QUERY say it draws."""
    found: set[str] = set()
    kitty = _KITTY_ANSWER.search(data)
    if kitty is not None and kitty.group(1) == b"OK":
        found.add("kitty")
    da1 = _DA1_ANSWER.search(data)
    if da1 is not None and "4" in da1.group(1).decode().split(";"):
        found.add("sixel")
    return found


def ask_terminal(fd_in: int, fd_out: int, timeout: float = 0.5) -> set[str]:
    """Send the Kitty query then DA1 and read the answers; every terminal answers DA1, so
    its answer ends the wait and one that arrived before it is the Kitty one. Only for a
    terminal nobody else reads (not while Textual runs: its input thread would take the
    answers as keys)."""
    os.write(fd_out, (KITTY_QUERY + DA1_QUERY).encode())
    data = b""
    deadline = time.monotonic() + timeout
    while not _DA1_ANSWER.search(data):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd_in], [], [], left)[0]:
            break
        chunk = os.read(fd_in, 1024)
        if not chunk:
            break
        data += chunk
    return parse_answers(data)


def cell_pixels(fd: int | None = None) -> tuple[int, int] | None:
    """A cell's size in pixels as the terminal reports it (TIOCGWINSZ), or None."""
    try:
        import fcntl
        import struct
        import sys
        import termios

        if fd is None:
            fd = sys.__stdout__.fileno() if sys.__stdout__ else -1
        rows, cols, xpix, ypix = struct.unpack(
            "HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except (ImportError, OSError, ValueError):
        return None
    if not (rows and cols and xpix and ypix):
        return None
    return xpix // cols, ypix // rows


_lock = threading.Lock()
_chosen: Graphics | None = None


def current(*, headless: bool = False, ask: Callable[[], str] | None = None) -> Graphics:
    """The graphics of this process's terminal, decided once (call from a thread: inside
    tmux it runs `tmux show-options`, and `ask` may wait up to a second). Where the
    environment names no terminal (and not inside tmux, which answers for itself), `ask`
    sends the queries and returns the answers (tui.terminal_answers). A headless app
    (tests) draws half-blocks unless LLMDECK_GRAPHICS names a protocol."""
    global _chosen
    env = os.environ
    forced = env.get(GRAPHICS_ENV, "auto").strip().lower()
    if headless:  # not cached: each test sets its own environment
        if forced not in PROTOCOLS:
            return Graphics("halfblock", reason="headless")
        return choose(env, tmux_passthrough=None)
    with _lock:
        if _chosen is None:
            passthrough, client_term = tmux_facts(env) if env.get("TMUX") else (None, "")
            chosen = choose(env, tmux_passthrough=passthrough, client_term=client_term)
            if (ask is not None and forced in ("", "auto") and not env.get("TMUX")
                    and outer_terminal(env) is None):
                answers = parse_answers(ask().encode())
                chosen = choose(env, tmux_passthrough=None, answers=answers)
                if answers:
                    chosen = Graphics(chosen.protocol, reason="the terminal answered")
            _chosen = chosen
            log.info("pictures: %s (%s)", _chosen.protocol, _chosen.reason)
        return _chosen
