"""Stop strings matched across chunk boundaries.

Engines stream text in arbitrary pieces, so a stop string may arrive split over several
deltas. `StopMatcher` holds back only a tail that could still become a stop string (not a
fixed number of characters), so ordinary text reaches the user at once, and never shows
the stop string (or anything after it).
"""

from __future__ import annotations


class StopMatcher:
    """Feed text pieces; get back the text safe to show and whether a stop was hit."""

    def __init__(self, stops: tuple[str, ...] | list[str] = ()) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stops if s))
        self._buffer = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text, once stopped
        self._firsts = tuple({s[0] for s in self._stops})
        self._maxlen = max((len(s) for s in self._stops), default=0)
        self._prefixes = frozenset(s[:i] for s in self._stops for i in range(1, len(s)))

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text to emit now, stopped). After a stop, further input is ignored."""
        if self.stopped:
            return "", True
        if not self._stops:
            return text, False
        buf = self._buffer + text if self._buffer else text
        # The stop that completes first wins (as it would, token by token), so the result
        # does not depend on how the stream was split; a tie goes to the longer stop.
        cut = -1
        best_end = -1
        matched = None
        for stop in self._stops:
            i = buf.find(stop)
            if i != -1 and (cut == -1 or i + len(stop) < best_end
                            or (i + len(stop) == best_end and i < cut)):
                cut, best_end, matched = i, i + len(stop), stop
        if cut != -1:
            self._buffer = ""
            self.stopped = True
            self.matched = matched
            return buf[:cut], True
        hold = self._held_tail(buf)
        if hold:
            self._buffer = buf[-hold:]
            return buf[:-hold], False
        self._buffer = ""
        return buf, False

    def finish(self, *, cut: bool = False) -> str:
        """The held-back tail once the stream ends without a stop. `cut`: the reply was
        cut by max_tokens, and the tail is the start of a stop it was writing (a base
        model's "\nUser"): it is dropped, not shown as the reply's last words."""
        out, self._buffer = ("" if self.stopped or cut else self._buffer), ""
        return out

    def _held_tail(self, buf: str) -> int:
        """Length of the longest tail of buf that is a proper prefix of some stop string."""
        n = len(buf)
        lo = max(0, n - self._maxlen + 1)
        best = n
        for c in self._firsts:
            i = buf.find(c, lo)
            while i != -1 and i < best:
                if buf[i:] in self._prefixes:
                    best = i
                    break
                i = buf.find(c, i + 1)
        return n - best
