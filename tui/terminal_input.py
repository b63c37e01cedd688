"""Terminal input that is not UTF-8 must not stop the app; a terminal that is gone must.

Textual's POSIX drivers decode what the terminal sends with a strict UTF-8 decoder, so a
paste from a Latin-1 terminal, a truncated multi-byte sequence or binary junk raises
UnicodeDecodeError in the input thread, and Textual then panics and exits (Textual issue
#6456, open for 8.2). Here their decoder replaces such bytes with U+FFFD, as a terminal
would show them; valid UTF-8 decodes exactly as before.

The same decoder sees every read of the terminal, and the driver reads only when select()
says there is input: an empty read is end-of-file, the terminal gone. A real SSH drop
also sends SIGHUP and the app ends, but a terminal can vanish without one (the app ran
under nohup, or on a pty that is not its controlling terminal); Textual then treats each
empty read as "nothing yet" and its input thread spins a core at 100%, with the model
still loaded, for as long as nobody kills it. So an empty read hangs the app up here:
SIGHUP, or SIGTERM where SIGHUP is ignored.
"""

from __future__ import annotations

import codecs
import functools
import os
import signal
from collections.abc import Callable
from typing import Any

_UTF8 = {"utf-8", "utf8", "utf_8"}


def _lenient(factory: Callable[[str], Any]) -> Callable[[str], Any]:
    def getincrementaldecoder(encoding: str) -> Any:
        decoder = factory(encoding)
        if encoding.lower() in _UTF8:
            return functools.partial(_hang_up_on_eof(decoder), errors="replace")
        return decoder

    getincrementaldecoder.llmdeck_lenient = True  # type: ignore[attr-defined]
    return getincrementaldecoder


def _hang_up_on_eof(decoder: type) -> type:
    """`decoder` whose decode of an empty read (not the driver's last, `final` one) hangs
    the process up."""

    class TerminalDecoder(decoder):  # type: ignore[misc, valid-type]
        def decode(self, data: bytes, final: bool = False) -> str:
            if not data and not final:
                hang_up()
            return super().decode(data, final)

    return TerminalDecoder


_hung_up = False


def hang_up() -> None:
    """End this process as its terminal going away would (once): SIGHUP, or SIGTERM
    where SIGHUP is ignored (nohup), since an app without a terminal serves nobody."""
    global _hung_up
    if _hung_up:
        return
    _hung_up = True
    ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM if ignored else signal.SIGHUP)


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
