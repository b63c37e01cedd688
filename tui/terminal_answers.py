"""A terminal's answers to our queries, taken out of Textual's input before they become keys.

Asking a terminal what it draws (the Kitty graphics query, DA1 for Sixel) while Textual
runs is unsafe as such: Textual's input thread reads the answers and types them into the
composer as keys (`^[[?62;4c`). `install()` gives Textual's Linux driver a parser that,
only while a question is out (at most a second, and only when a picture is first shown in
a terminal the environment did not name), lifts the answers out of the input and hands
them to the asking thread. Everything else passes through unchanged and undelayed; a
sequence split at the end of a read is held until the next read completes it.
"""

from __future__ import annotations

import re
import threading
from time import monotonic

from textual._xterm_parser import XTermParser

from tui.terminal_escape import EscapeSplitter

_ANSWER = re.compile(r"\x1b_Gi=31;[^\x1b]*\x1b\\|\x1b\[\?[\d;]*c")
# The start of an answer cut off by the end of a read.
_PARTIAL = re.compile(r"\x1b(?:_(?:G[^\x1b]*\x1b?)?|\[(?:\?[\d;]*)?)?\Z")


class AnswerCatcher:
    """Lifts terminal answers out of input text while a question is out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0  # a question is out until then
        self._held = ""
        self._got = ""
        self._done = threading.Event()

    def expect(self, timeout: float) -> None:
        with self._lock:
            self._got = ""
            self._done.clear()
            self._until = monotonic() + timeout

    def take(self, text: str) -> str:
        """`text` less the answers in it (called by the input thread for every read)."""
        if not self._until and not self._held:
            return text
        with self._lock:
            text, self._held = self._held + text, ""
            if not self._until or monotonic() > self._until:
                self._until = 0.0
                return text
            kept, pos = [], 0
            for match in _ANSWER.finditer(text):
                kept.append(text[pos:match.start()])
                self._got += match.group()
                pos = match.end()
            rest = text[pos:]
            if self._got.endswith("c"):  # DA1 comes last: every answer is in
                self._until = 0.0
                self._done.set()
            elif rest and (partial := _PARTIAL.search(rest)) is not None:
                self._held, rest = rest[partial.start():], rest[:partial.start()]
            return "".join(kept) + rest

    def wait(self, timeout: float) -> str:
        """The answers that came within `timeout` (the question is then closed)."""
        self._done.wait(timeout)
        with self._lock:
            self._until = 0.0
            return self._got


CATCHER = AnswerCatcher()


class AnsweringParser(XTermParser):
    """Textual's input parser, fed through CATCHER, then through an EscapeSplitter (an
    Esc typed together with the next key stays Esc: tui.terminal_escape)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003  (Textual's)
        super().__init__(*args, **kwargs)
        self.escapes = EscapeSplitter()

    def feed(self, data: str):  # noqa: ANN201  (Textual's)
        kept = CATCHER.take(data)
        if data and not kept:
            return ()  # all of it was an answer (or held): feeding "" would mean end of input
        return super().feed(self.escapes.take(kept))


def install() -> None:
    """Make Textual's Linux driver parse input through CATCHER (idempotent; before run)."""
    try:
        from textual.drivers import linux_driver
    except ImportError:  # Windows: no such driver, no queries
        return
    linux_driver.XTermParser = AnsweringParser  # type: ignore[misc]


def installed() -> bool:
    try:
        from textual.drivers import linux_driver
    except ImportError:
        return False
    return linux_driver.XTermParser is AnsweringParser


def ask(write, timeout: float = 1.0) -> str:
    """Send the Kitty query and DA1 with `write` (thread-safe: Textual's driver queues it)
    and return the answers that come back within `timeout`; "" where nobody answers."""
    from tui.terminal_graphics import DA1_QUERY, KITTY_QUERY

    CATCHER.expect(timeout)
    write(KITTY_QUERY + DA1_QUERY)
    return CATCHER.wait(timeout)
