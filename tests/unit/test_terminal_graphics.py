"""Which pictures the terminal draws (tui.terminal_graphics): from the environment, from a
terminal's answers to queries (a pty whose far end is `terminal_fake`), and inside a real
tmux, whose allow-passthrough decides whether any graphics sequence gets out."""

from __future__ import annotations

import os
import pty
import select
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.tmux_client import RealTmux
from tui import terminal_graphics as tg

KITTY_OK = b"\x1b_Gi=31;OK\x1b\\"
DA1_XTERM_SIXEL = b"\x1b[?63;1;2;4;6;9;15;22c"
DA1_PLAIN = b"\x1b[?62;22c"


@pytest.mark.parametrize(("env", "protocol"), [
    ({"TERM": "xterm-kitty"}, "kitty"),  # kitty, also over SSH (TERM travels)
    ({"TERM": "xterm-256color", "KITTY_WINDOW_ID": "3"}, "kitty"),
    ({"TERM": "xterm-ghostty"}, "kitty"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "iTerm.app"}, "iterm"),
    ({"TERM": "xterm-256color", "LC_TERMINAL": "iTerm2"}, "iterm"),  # iTerm2 over SSH
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, "iterm"),
    ({"TERM": "foot"}, "sixel"),
    ({"TERM": "xterm-256color", "KONSOLE_VERSION": "230804"}, "sixel"),
    ({"TERM": "xterm-256color"}, "halfblock"),
    ({"TERM": "linux"}, "halfblock"),
])
def test_the_environment_names_the_terminal(env: dict, protocol: str) -> None:
    chosen = tg.choose(env, tmux_passthrough=None)
    assert chosen.protocol == protocol and not chosen.tmux


def test_llmdeck_graphics_overrides_and_a_bad_value_falls_back_with_a_reason() -> None:
    assert tg.choose({"TERM": "xterm-kitty", "LLMDECK_GRAPHICS": "halfblock"},
                     tmux_passthrough=None).protocol == "halfblock"
    assert tg.choose({"TERM": "xterm", "LLMDECK_GRAPHICS": "Sixel"},
                     tmux_passthrough=None).protocol == "sixel"
    assert tg.choose({"TERM": "xterm", "LLMDECK_GRAPHICS": "auto"},
                     tmux_passthrough=None).protocol == "halfblock"
    bad = tg.choose({"TERM": "xterm-kitty", "LLMDECK_GRAPHICS": "kity"}, tmux_passthrough=None)
    assert bad.protocol == "halfblock" and "'kity' is not understood" in bad.reason


def test_inside_tmux_only_passthrough_lets_pictures_out_and_they_are_wrapped() -> None:
    env = {"TERM": "tmux-256color", "TMUX": "/tmp/tmux-0/default,1,0", "KITTY_WINDOW_ID": "1"}
    off = tg.choose(env, tmux_passthrough=False)
    assert off.protocol == "halfblock" and "allow-passthrough" in off.reason
    on = tg.choose(env, tmux_passthrough=True)
    assert on.protocol == "kitty" and on.tmux
    assert on.wrap("\x1b_Ga=d\x1b\\") == "\x1bPtmux;\x1b\x1b_Ga=d\x1b\x1b\\\x1b\\"
    assert tg.choose({**env, "LLMDECK_GRAPHICS": "kitty"}, tmux_passthrough=False).tmux
    # tmux hides TERM_PROGRAM; the client's terminal (tmux's client_termname) still tells.
    bare = {"TERM": "tmux-256color", "TMUX": "/tmp/tmux-0/default,1,0", "TERM_PROGRAM": "tmux"}
    assert tg.choose(bare, tmux_passthrough=True).protocol == "halfblock"
    assert tg.choose(bare, tmux_passthrough=True, client_term="xterm-kitty").protocol == "kitty"
    assert tg.choose(bare, tmux_passthrough=True, client_term="foot").protocol == "sixel"


def test_the_terminals_answers_decide_when_the_environment_does_not() -> None:
    assert tg.parse_answers(KITTY_OK + DA1_PLAIN) == {"kitty"}
    assert tg.parse_answers(DA1_XTERM_SIXEL) == {"sixel"}
    assert tg.parse_answers(b"\x1b_Gi=31;ENOTSUPPORTED:no\x1b\\" + DA1_PLAIN) == set()
    assert tg.parse_answers(b"\x1b[?62;14;22c") == set()  # 14 is not 4
    env = {"TERM": "xterm-256color"}
    assert tg.choose(env, tmux_passthrough=None, answers={"sixel"}).protocol == "sixel"
    assert tg.choose(env, tmux_passthrough=None, answers={"kitty", "sixel"}).protocol == "kitty"


def terminal_fake(fd: int, answer: bytes, asked: list[bytes]) -> threading.Thread:
    """The far end of a pty playing a terminal: reads the queries, sends `answer`."""
    def run() -> None:
        data = b""
        while b"\x1b[c" not in data:
            if select.select([fd], [], [], 5)[0]:
                data += os.read(fd, 1024)
            else:
                return
        asked.append(data)
        if answer:
            os.write(fd, answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("answer", "found"), [
    (KITTY_OK + DA1_PLAIN, {"kitty"}),
    (DA1_XTERM_SIXEL, {"sixel"}),
    (DA1_PLAIN, set()),
])
def test_ask_terminal_over_a_pty(answer: bytes, found: set) -> None:
    master, slave = pty.openpty()
    try:
        import tty
        tty.setraw(slave)
        asked: list[bytes] = []
        fake = terminal_fake(master, answer, asked)
        assert tg.ask_terminal(slave, slave, timeout=5) == found
        fake.join(5)
        assert asked and asked[0].startswith(b"\x1b_G") and asked[0].endswith(b"\x1b[c")
    finally:
        os.close(master)
        os.close(slave)


def test_a_terminal_that_never_answers_costs_only_the_timeout() -> None:
    master, slave = pty.openpty()
    try:
        import tty
        tty.setraw(slave)
        started = time.monotonic()
        assert tg.ask_terminal(slave, slave, timeout=0.3) == set()
        assert time.monotonic() - started < 3
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("passthrough", [True, False])
def test_real_tmux_lets_a_wrapped_kitty_sequence_out_only_with_passthrough(
        tmp_path: Path, passthrough: bool) -> None:
    wrapped = tg.Graphics("kitty", tmux=True).wrap("\x1b_Ga=d,d=I,i=77,q=2\x1b\\")
    script = tmp_path / "inner.sh"
    probe = tmp_path / "probe.txt"
    # Inside tmux: what our detection says, then the wrapped sequence, then a marker.
    ask = tmp_path / "ask.py"
    ask.write_text("import os\nfrom tui import terminal_graphics as t\n"
                   f"open({str(probe)!r}, 'w').write(str(t.tmux_facts(os.environ)))\n")
    script.write_text(f"{_python()} {ask}\nprintf '%s' {_sh(wrapped)}\n"
                      "printf 'END''MARK'\nsleep 30\n")
    tmux = RealTmux(tmp_path, passthrough, f"sh {script}")
    try:
        assert tmux.read_until(b"ENDMARK", 30), tmux.output[-500:]
        # The pane's setting, and the terminal tmux's client runs in (this pty).
        assert probe.read_text() == str((passthrough, "xterm-256color"))
        assert (b"\x1b_Ga=d,d=I,i=77,q=2\x1b\\" in tmux.output) is passthrough
    finally:
        tmux.close()


def _python() -> str:
    import sys
    return f"cd {Path(__file__).resolve().parents[2]} && {sys.executable}"


def _sh(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_answers_are_lifted_out_of_input_only_while_a_question_is_out() -> None:
    from tui.terminal_answers import AnswerCatcher

    catcher = AnswerCatcher()
    assert catcher.take("\x1b[?62;4c") == "\x1b[?62;4c"  # no question out: untouched
    catcher.expect(5)
    # Split anywhere, with keys around: the keys pass, the answers do not.
    parts = ["a\x1b_Gi=3", "1;OK\x1b", "\\b\x1b[?6", "2;4;22", "cz"]
    kept = "".join(catcher.take(p) for p in parts)
    assert kept == "abz"
    assert catcher.wait(0) == "\x1b_Gi=31;OK\x1b\\\x1b[?62;4;22c"
    assert tg.parse_answers(catcher.wait(0).encode()) == {"kitty", "sixel"}
    assert catcher.take("\x1b[A") == "\x1b[A"  # answered: an arrow key is a key again


def test_a_question_nobody_answers_closes_and_holds_nothing_back() -> None:
    from tui.terminal_answers import AnswerCatcher

    catcher = AnswerCatcher()
    catcher.expect(5)
    assert catcher.take("x\x1b[") == "x"  # maybe the start of an answer: held a moment
    assert catcher.take("B") == "\x1b[B"  # it was a key: given on at once, whole
    assert catcher.wait(0.01) == ""
    assert catcher.take("\x1b") == "\x1b"  # closed: Escape is not held
