"""Esc typed in the same read as the next key, and Alt+Enter, through the parser the app
installs in Textual's driver (tui.terminal_answers.AnsweringParser): the bytes a terminal
sends for `tmux send-keys Escape C-f` or a bunched SSH packet, and for Alt+Enter."""

from __future__ import annotations

import pytest

from tui.terminal_answers import AnsweringParser
from tui.terminal_escape import EscapeSplitter


def _keys(*reads: str) -> list[tuple[str, str | None]]:
    parser = AnsweringParser()
    events = [e for read in reads for e in parser.feed(read)] + list(parser.feed(""))
    return [(getattr(e, "key", type(e).__name__), getattr(e, "character", None)
             if hasattr(e, "key") else getattr(e, "text", None)) for e in events]


@pytest.mark.parametrize(("typed", "first", "then"), [
    ("\x1b\x06", "escape", "ctrl+f"),  # Esc, Ctrl+F: the picker closes, search opens
    ("\x1b\x0f", "escape", "ctrl+o"),  # Esc, Ctrl+O
    ("\x1b ", "escape", "space"),
])
def test_esc_in_one_read_with_a_control_key_is_kept(typed: str, first: str, then: str) -> None:
    """Textual read these as Alt+key and dropped the Alt: the Esc was lost."""
    assert [k for k, _ in _keys(typed)] == [first, then]


def test_esc_then_typed_text_is_esc_then_the_text() -> None:
    keys = _keys("abc\x1bxyz")  # (ESC x, not ESC f or b: those are word moves)
    assert [k for k, _ in keys][3] == "escape"
    assert "".join(c or "" for k, c in keys if k != "escape") == "abcxyz"


def test_esc_words_esc_in_one_read_types_the_words_and_no_stray_caret() -> None:
    keys = _keys("hi\x1bthere\x1b\x06")
    assert [k for k, _ in keys] == ["h", "i", "escape", "t", "h", "e", "r", "e", "escape",
                                    "ctrl+f"]


def test_alt_enter_is_alt_enter_not_enter() -> None:
    """ESC CR (xterm's, tmux's and iTerm2's Alt+Enter) was read as Enter: it sent the
    message; the key table says it adds a new line."""
    assert ("alt+enter", None) in _keys("line1\x1b\rline2")
    assert "enter" not in [k for k, _ in _keys("line1\x1b\rline2")]


@pytest.mark.parametrize(("typed", "keys"), [
    ("\x1b[1;3D", ["alt+left"]),
    ("\x1bOP", ["f1"]),
    ("\x1b[A", ["up"]),
    ("\x1b\x1b", ["escape", "escape"]),
    ("\x1b", ["escape"]),
    ("\x1bf", ["ctrl+right"]),  # macOS Terminal's Option+Right
    ("\x1bb", ["ctrl+left"]),
    ("\x1b\t", ["shift+tab"]),
    ("\x1b\x7f", ["ctrl+w"]),  # Alt+Backspace: delete a word
])
def test_escape_sequences_pass_unchanged(typed: str, keys: list[str]) -> None:
    assert [k for k, _ in _keys(typed)] == keys


def test_a_bracketed_paste_is_left_as_pasted_even_across_reads() -> None:
    splitter = EscapeSplitter()
    first = "\x1b[200~a\x1bb\x1b\rc\x1b[20"  # the paste's end is cut by the read
    assert splitter.take(first) == first
    assert splitter.take("1~\x1b\x06") == "1~\x1b[27u\x06"
    assert [k for k, _ in _keys("\x1b[200~hello\x1b[201~\x1b\x06")] == ["Paste", "escape", "ctrl+f"]
