"""Esc typed together with the next key stays Esc, and Alt+Enter stays Alt+Enter.

A terminal sends Esc as the one byte ESC, and Alt+key as ESC followed by the key's bytes:
only timing tells "Esc, then Ctrl+F" from "Alt+Ctrl+F". Textual's parser reads ESC
followed, in the same read, by a control character, Enter or a letter as Alt+that key,
and then drops the Alt from control keys and Enter. So a burst (a bunched SSH packet, a
script, `tmux send-keys Escape C-f`) lost its Esc: the model picker stayed open and
Ctrl+F went to it. And Alt+Enter (ESC CR, as xterm, tmux and iTerm2 send it) arrived as
Enter and sent a half-written message instead of the new line the key table promises.

llmdeck binds no Alt+letter nor Alt+control key, so here, before Textual parses a read:
ESC followed by a control character, a lowercase letter or a space, where Textual's table
gives the pair no meaning of its own (ESC b and ESC f stay macOS's Option+Left/Right), is
an Esc of its own, and ESC CR is Alt+Enter: each written as the kitty keyboard protocol's
key (CSI 27u, CSI 13;3u), which Textual reads whole, so the text after an Esc is text (an
ESC, then words, then another ESC in one read gave a stray "^" too). Escape sequences
(ESC [, ESC O, ...) and bracketed pastes pass unchanged.
"""

from __future__ import annotations

import re

from textual._ansi_sequences import ANSI_SEQUENCES_KEYS
from textual.constants import DISABLE_KITTY_KEY

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
ALT_ENTER = "\x1b[13;3u"  # the kitty keyboard protocol's Alt+Enter
ESCAPE = "\x1b[27u"  # and its Esc: complete, so nothing after it is read as Alt+key
# ESC before a control character (not ESC, not CR), a lowercase letter or a space, unless
# Textual's own table gives that pair a meaning (ESC b and ESC f are macOS Terminal's
# Option+Left/Right, ESC Tab is Shift+Tab, ESC DEL Alt+Backspace, ESC and a digit an
# Option character): no escape sequence starts so.
_CANDIDATES = [chr(c) for c in range(0x20) if chr(c) not in "\x1b\r"] + list(
    "abcdefghijklmnopqrstuvwxyz ")
_LONE_ESC = re.compile("\x1b(?=[" + re.escape("".join(
    c for c in _CANDIDATES if "\x1b" + c not in ANSI_SEQUENCES_KEYS)) + "])")


def _rewrite(typed: str) -> str:
    if DISABLE_KITTY_KEY:  # Textual would not read the protocol's keys: leave it be
        return typed
    return _LONE_ESC.sub(ESCAPE, typed.replace("\x1b\r", ALT_ENTER))


class EscapeSplitter:
    """Rewrites each read of the terminal (see the module docstring); keeps whether a
    bracketed paste is open across reads, and the end of one that a read cut."""

    def __init__(self) -> None:
        self.in_paste = False
        self._tail = ""  # the last characters of an open paste: its end may straddle reads

    def take(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        while pos < len(text):
            if self.in_paste:
                joined = self._tail + text[pos:]
                end = joined.find(PASTE_END)
                if end < 0:
                    out.append(text[pos:])
                    self._tail = joined[-(len(PASTE_END) - 1):]
                    break
                stop = pos + end - len(self._tail) + len(PASTE_END)
                out.append(text[pos:stop])
                pos, self.in_paste, self._tail = stop, False, ""
            else:
                start = text.find(PASTE_START, pos)
                if start < 0:
                    out.append(_rewrite(text[pos:]))
                    break
                out.append(_rewrite(text[pos:start]) + PASTE_START)
                pos, self.in_paste = start + len(PASTE_START), True
        return "".join(out)
