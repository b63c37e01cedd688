"""JSON lines over a stream: the service's one framing, for calls and events alike.

Why JSON lines over asyncio Unix-socket streams: the standard library has all of it (no
RPC dependency to earn its place), a person can read and type the protocol with
`socat - UNIX-CONNECT:<socket>`, and one framing carries calls, results and pushed
events in the order they happen. Never pickle: a frame is data, not code.

Every bound is here: a line longer than MAX_IN_BYTES, a line begun and not finished
within LINE_DEADLINE_S, text that is not UTF-8 JSON, or an object nested too deep ends
that client only (FrameError), never the service.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from core import json_text

# A message typed in the composer (a pasted document included) fits with room to spare;
# bigger things (attachments) travel as paths, never as bytes.
MAX_IN_BYTES = 4 * 2**20
# What the service sends in one line (a page of long messages); a bigger result is
# refused with an error frame instead of sent.
MAX_OUT_BYTES = 32 * 2**20
LINE_DEADLINE_S = 10.0  # a line begun must end within this (a stalled writer is dropped)
READ_CHUNK = 64 * 1024


class FrameError(Exception):
    """The peer broke the framing; `code` and `message` go back in an error frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LineReader:
    """Reads one JSON object per line from `reader`, holding at most `max_bytes` of one
    line in memory (asyncio's readline would buffer up to its limit and then lose sync)."""

    def __init__(self, reader: asyncio.StreamReader, *, max_bytes: int = MAX_IN_BYTES,
                 deadline_s: float = LINE_DEADLINE_S) -> None:
        self._reader = reader
        self._buf = bytearray()
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self._begun: float | None = None  # when the line now being read began

    async def read(self) -> dict[str, Any] | None:
        """The next object, or None at a clean end of stream (between lines).

        The deadline counts from a line's first byte, not from the last piece: a writer
        that drips a byte every few seconds would otherwise hold its line (and its place
        among the clients) for ever."""
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[:end + 1]
                self._begun = time.monotonic() if self._buf else None
                if not line.strip():
                    continue
                return decode_line(line)
            if len(self._buf) > self.max_bytes:
                raise FrameError("TOO_LARGE", f"A line is over the {self.max_bytes:,}-byte "
                                 "limit; the connection is closed.")
            if self._buf:  # mid-line: the rest must come soon
                if self._begun is None:
                    self._begun = time.monotonic()
                left = self._begun + self.deadline_s - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    chunk = await asyncio.wait_for(self._reader.read(READ_CHUNK), left)
                except TimeoutError:
                    raise FrameError("TIMEOUT", f"A line was begun and not ended within "
                                     f"{self.deadline_s:.0f} s; the connection is closed.") from None
            else:
                chunk = await self._reader.read(READ_CHUNK)
                self._begun = time.monotonic()
            if not chunk:
                if self._buf:
                    raise FrameError("BAD_FRAME", "The connection ended in the middle of a line.")
                return None
            self._buf += chunk


def decode_line(line: bytes) -> dict[str, Any]:
    try:
        value = json_text.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise FrameError("BAD_FRAME", "A line is not JSON; the protocol is one JSON object "
                         "per line.") from None
    if not isinstance(value, dict):
        raise FrameError("BAD_FRAME", "A line is JSON but not an object.")
    return value


def encode_line(message: dict[str, Any]) -> bytes:
    """One line of compact UTF-8 JSON. ValueError for NaN/inf (not JSON) or a circle."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8") + b"\n"
