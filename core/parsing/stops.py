"""Stop strings matched across chunk boundaries.

Engines stream text in arbitrary pieces, so a stop string may arrive split over several
deltas. `StopMatcher` holds back just enough trailing text to decide, and never shows
the stop string (or anything after it) to the user.
"""

from __future__ import annotations


class StopMatcher:
    """Feed text pieces; get back the text safe to show and whether a stop was hit."""

    def __init__(self, stops: tuple[str, ...] | list[str] = ()) -> None:
        self._stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._buffer = ""
        self.stopped = False

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text to emit now, stopped). After a stop, further input is ignored."""
        if self.stopped:
            return "", True
        if not self._stops:
            return text, False
        self._buffer += text
        cut = self._first_stop(self._buffer)
        if cut is not None:
            out = self._buffer[:cut]
            self._buffer = ""
            self.stopped = True
            return out, True
        if self._hold and len(self._buffer) > self._hold:
            out = self._buffer[: -self._hold]
            self._buffer = self._buffer[-self._hold :]
            return out, False
        if not self._hold:
            out, self._buffer = self._buffer, ""
            return out, False
        return "", False

    def finish(self) -> str:
        """The held-back tail once the stream ends without a stop."""
        out, self._buffer = ("" if self.stopped else self._buffer), ""
        return out

    def _first_stop(self, text: str) -> int | None:
        best: int | None = None
        for stop in self._stops:
            idx = text.find(stop)
            if idx != -1 and (best is None or idx < best):
                best = idx
        return best
