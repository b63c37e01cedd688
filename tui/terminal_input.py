"""Terminal input that is not UTF-8 must not stop the app.

Textual's POSIX drivers decode what the terminal sends with a strict UTF-8 decoder, so a
paste from a Latin-1 terminal, a truncated multi-byte sequence or binary junk raises
UnicodeDecodeError in the input thread, and Textual then panics and exits (Textual issue
#6456, open for 8.2). Here their decoder replaces such bytes with U+FFFD, as a terminal
would show them; valid UTF-8 decodes exactly as before.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from typing import Any

_UTF8 = {"utf-8", "utf8", "utf_8"}


def _lenient(factory: Callable[[str], Any]) -> Callable[[str], Any]:
    def getincrementaldecoder(encoding: str) -> Any:
        decoder = factory(encoding)
        if encoding.lower() in _UTF8:
            return functools.partial(decoder, errors="replace")
        return decoder

    getincrementaldecoder.llmdeck_lenient = True  # type: ignore[attr-defined]
    return getincrementaldecoder


def install() -> None:
    """Give Textual's terminal drivers a decoder that replaces invalid UTF-8 (idempotent)."""
    for name in ("linux_driver", "linux_inline_driver"):
        try:
            module = __import__(f"textual.drivers.{name}", fromlist=["getincrementaldecoder"])
        except ImportError:  # Windows: its driver reads keys as text, not bytes
            continue
        current = getattr(module, "getincrementaldecoder", None)
        if current is not None and not getattr(current, "llmdeck_lenient", False):
            module.getincrementaldecoder = _lenient(codecs.getincrementaldecoder)
