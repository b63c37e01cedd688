"""Esc typed together with the next key stays Esc, and Alt+Enter stays Alt+Enter.

A terminal sends Esc as the one byte ESC, and Alt+key as ESC followed by the key's bytes:
only timing tells "Esc, then Ctrl+F" from "Alt+Ctrl+F". Textual's parser reads ESC
followed, in the same read, by a control character, Enter or a letter as Alt+that key,
and then drops the Alt from control keys and Enter. So a burst (a bunched SSH packet, a
script, `tmux send-keys Escape C-f`) lost its Esc: the model picker stayed open and
Ctrl+F went to it. And Alt+Enter (ESC CR, as xterm, tmux and iTerm2 send it) arrived as
Enter and sent a half-written message instead of the new line the key table promises.

llmdeck binds no Alt+letter nor Alt+control key, so here, before Textual parses a read:
ESC followed by a control character, a lowercase letter, a digit or a space is an Esc of
its own (written ESC ESC, which Textual reads as Esc, then the rest as before), and ESC CR
is Alt+Enter (written as the kitty keyboard protocol's CSI 13;3u, which Textual reads as
alt+enter). Escape sequences (ESC [, ESC O, ...) and bracketed pastes pass unchanged.
"""

from __future__ import annotations

import re

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
ALT_ENTER = "\x1b[13;3u"
# ESC before a control character (not ESC itself, not CR), a lowercase letter, a digit or
# a space: no escape sequence starts so. ESC DEL is left: Textual reads it as Alt+Backspace
# (delete a word), as terminals mean it.
_LONE_ESC = re.compile(r"\x1b(?=[\x00-\x0c\x0e-\x1a\x1c-\x1fa-z0-9 ])")


def _rewrite(typed: str) -> str:
    return _LONE_ESC.sub("\x1b\x1b", typed.replace("\x1b\r", ALT_ENTER))


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
