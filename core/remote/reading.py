"""Reading a remote's answer within bounds: a remote is outside data, and may be hostile.

A remote that streams forever, sends one line of 500 MB, answers with an endless body or
never answers at all must not grow the process (`llmdeck serve` serves other clients from
the same loop) nor hold a request for good. So every read here is bounded three ways:

- in size: a line of the stream (MAX_LINE_BYTES), a whole body that is not a stream
  (MAX_BODY_BYTES), all the bytes of one reply (MAX_REPLY_BYTES), the text of a reply
  (ReplyBounds, derived from the max_tokens the client asked for);
- in time: connecting, the first byte, a stall between bytes, and the whole reply;
- in kind: bytes that are not UTF-8 are replaced, never raised.

Each way a bound is hit is an exception carrying the sentence a person reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

T = TypeVar("T")
MIB = 1024 * 1024
MAX_LINE_BYTES = 4 * MIB  # one server-sent event line; a token's chunk is a few hundred bytes
MAX_BODY_BYTES = 16 * MIB  # a non-streamed completion, an error body, a model list
OPEN_ENDED_TOKENS = 131_072  # the most tokens a reply without a max_tokens is allowed
MAX_REPLY_BYTES = 64 * MIB  # every byte of one reply, whatever max_tokens says
MAX_TOOL_CALLS = 64  # tool calls in one reply
MAX_TOOL_ARGUMENT_CHARS = 256 * 1024  # the arguments of one tool call
CHARS_PER_TOKEN = 64  # generous: a token of code indentation can be a long run of spaces
MAX_MESSAGE_CHARS = 1000  # of a remote's own error message, as shown to a person


@dataclass(frozen=True, slots=True)
class ReplyBounds:
    """How much one reply may bring before it is cut, from the client's max_tokens.

    A remote that honours max_tokens never comes near these; one that ignores it is cut
    as a local model would be: the text so far kept, the reply ended with "length"."""

    max_tokens: int
    pieces: int  # deltas of text, reasoning or tool arguments (about one per token)
    chars: int
    seconds: float

    @classmethod
    def for_max_tokens(cls, max_tokens: int) -> ReplyBounds:
        # No cap of its own (ROOM_LEFT): bounded as a reply that fills a 128k context.
        n = max(1, min(int(max_tokens), OPEN_ENDED_TOKENS))
        # pieces: twice the tokens, as servers that split a token's text in two exist;
        # seconds: 10 minutes plus 2 tokens a second, slower than any useful remote.
        return cls(n, 2 * n + 64, CHARS_PER_TOKEN * n + 4096, 600.0 + n / 2)


class RemoteReadError(Exception):
    """A bound was hit or the answer could not be read; `reason` completes the sentence
    '<the remote> <reason>'."""

    def __init__(self, reason: str, *, kind: str = "broken") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind  # "connect" | "first-byte" | "stall" | "time" | "size" | "broken"


@dataclass
class Deadlines:
    """The timeouts of one request, and the reply's overall deadline."""

    connect_s: float
    first_byte_s: float
    stall_s: float
    reply_s: float
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def left(self) -> float:
        return self.reply_s - (time.monotonic() - self.started)


async def within(awaitable: Awaitable[T], seconds: float, *, kind: str, deadlines: Deadlines,
                 shown: float | None = None) -> T:
    """Await with a timeout that, when hit, says which one it was (or the reply's limit);
    `shown` is the figure the sentence names when `seconds` adds another wait to it."""
    left = deadlines.left()
    limit = min(seconds, left)
    try:
        async with asyncio.timeout(max(limit, 0.001)) as scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():  # a timeout of aiohttp's own (the connect): not ours to name
            raise
        if left <= seconds:
            raise RemoteReadError(f"was still answering after {deadlines.reply_s:g} s, the limit "
                                  "for one reply", kind="time") from None
        raise RemoteReadError(timeout_reason(kind, shown or seconds), kind=kind) from None


def timeout_reason(kind: str, seconds: float) -> str:
    """Which timeout ran out, as the end of a sentence about the remote."""
    return _TIMEOUT_REASONS[kind].format(s=seconds)


_TIMEOUT_REASONS = {
    "connect": "did not accept a connection within {s:g} s (connect timeout)",
    "first-byte": "accepted the request but sent nothing back within {s:g} s (first-byte timeout)",
    "stall": "stopped sending mid-answer: nothing came for {s:g} s (stall timeout)",
}


class ByteBudget:
    """Counts every byte of one reply against MAX_REPLY_BYTES (or another cap)."""

    def __init__(self, cap: int = MAX_REPLY_BYTES) -> None:
        self.cap = cap
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise RemoteReadError(f"sent more than {self.cap // MIB} MiB for one reply; the "
                                  "rest was not read", kind="size")


async def lines(content: aiohttp.StreamReader, deadlines: Deadlines, budget: ByteBudget,
                max_line: int = MAX_LINE_BYTES) -> AsyncIterator[bytes]:
    """The lines of a stream (without their newline), each at most `max_line` bytes: an
    over-long line is refused once it passes the cap, never buffered whole. The first
    read waits up to the first-byte timeout, every later one up to the stall timeout."""
    pending = bytearray()
    kind = "first-byte"
    while True:
        wait = deadlines.first_byte_s if kind == "first-byte" else deadlines.stall_s
        chunk = await within(content.readany(), wait, kind=kind, deadlines=deadlines)
        if not chunk:
            if pending:
                yield bytes(pending)
            return
        kind = "stall"
        budget.take(len(chunk))
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if len(pending) + end - start > max_line:
                raise _long_line(max_line)
            pending += chunk[start:end]
            yield bytes(pending)
            pending.clear()
            start = end + 1
        if len(pending) + len(chunk) - start > max_line:
            raise _long_line(max_line)
        pending += chunk[start:]


def _long_line(max_line: int) -> RemoteReadError:
    return RemoteReadError(f"sent a line longer than {max_line // MIB} MiB; it was refused "
                           "unread", kind="size")


async def body(content: aiohttp.StreamReader, deadlines: Deadlines,
               cap: int = MAX_BODY_BYTES) -> bytes:
    """A whole body that is not a stream, refused once it passes `cap` (never buffered
    past it: a body that never ends costs `cap` bytes, not all memory)."""
    out = bytearray()
    kind = "first-byte"
    while True:
        wait = deadlines.first_byte_s if kind == "first-byte" else deadlines.stall_s
        chunk = await within(content.readany(), wait, kind=kind, deadlines=deadlines)
        if not chunk:
            return bytes(out)
        kind = "stall"
        if len(out) + len(chunk) > cap:
            raise RemoteReadError(f"sent an answer larger than {cap // MIB} MiB; it was refused "
                                  "after that much", kind="size")
        out += chunk


def text(data: bytes) -> str:
    """Bytes from a remote as text: what is not UTF-8 becomes U+FFFD, never an exception."""
    return data.decode("utf-8", errors="replace")


def clipped(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A remote's own words, shortened to what a person reads in an error line."""
    return message if len(message) <= limit else message[:limit] + f"… ({len(message):,} characters)"
