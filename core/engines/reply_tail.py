"""The per-token tail both engines share: from a decoded piece of text to what is shown.

Each engine decodes its tokens into text pieces its own way (mlx-lm's streaming
detokenizer, llama.cpp's stream chunks); from there on a reply is the same for both:
stop strings are matched across pieces (core.parsing.stops holds back a tail that could
still become one, and cuts the reply at one), a base model's transcript prompt drops the
reply's leading whitespace ("Assistant:" leaves a space) and its trailing whitespace (the
newline before the next "User:" turn marker), and the end of a reply either
flushes what was held back or, cut by max_tokens, drops the start of a stop it was
writing. Written once here, so both engines end a reply alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.parsing.stops import StopMatcher


class ReplyTail:
    """One reply's text on its way out: `feed` each piece, `end` once."""

    __slots__ = ("_stops", "trim_start", "trim_end", "_pending")

    def __init__(self, stops: Iterable[str] = (), *, trim_start: bool = False,
                 trim_end: bool | None = None) -> None:
        self._stops = StopMatcher(tuple(stops))
        self.trim_start = trim_start  # drop leading whitespace until some text shows
        # hold trailing whitespace back until text follows it; the reply's last is dropped
        self.trim_end = trim_start if trim_end is None else trim_end
        self._pending = ""

    @property
    def stopped(self) -> bool:
        """A stop string was reached: nothing more of this reply is shown."""
        return self._stops.stopped

    @property
    def matched(self) -> str | None:
        """The stop string that ended the reply (for Done.stop_sequence), or None."""
        return self._stops.matched

    def feed(self, piece: str) -> tuple[str, bool]:
        """(text to show now, whether a stop string was reached)."""
        shown, stopped = self._stops.feed(piece)
        return self._trimmed(shown), stopped

    def end(self, piece: str = "", *, cut: bool = False) -> str:
        """The reply's last text: `piece` (the decoder's final bytes, if any), then what was
        held back as a possible stop, unless a stop was reached or `cut` (max_tokens ended
        it: the held tail is the start of a stop, not the reply's last words)."""
        if self._stops.stopped:
            return ""
        text, stopped = self.feed(piece)
        return text if stopped else text + self._trimmed(self._stops.finish(cut=cut))

    def _trimmed(self, text: str) -> str:
        if self.trim_start and text:
            text = text.lstrip()
            self.trim_start = not text
        if self.trim_end and text:
            text = self._pending + text
            body = text.rstrip()
            self._pending = text[len(body):]
            text = body
        return text
