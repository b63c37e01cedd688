"""A client's outgoing queue: bounded in bytes, and merging stream text when the client lags.

The service never waits for a client: events go into this queue and one writer task per
client drains it. While a line waits unsent, the next text delta of the same turn and
kind is merged into it (one message with the joined text, the later seq), so a slow
reader gets fewer, larger messages instead of one per token and the queue does not grow
with the reply. Status pushes replace the waiting one. Everything else (results, tool
statuses) is encoded as it is queued, so the queue holds bytes, not live objects, and
counts them: past MAX_PENDING_BYTES (or MAX_PENDING messages) the client is dropped as
too slow. A client that asks and never reads can hold no more than that.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from core.service.framing import MAX_OUT_BYTES, encode_line

MAX_PENDING = 2_000
# Two of the largest answers a client may get (a page of long messages): a client that
# reads lets the writer take one while the next waits; one that does not is dropped here.
MAX_PENDING_BYTES = 2 * MAX_OUT_BYTES
_MERGEABLE = ("TextDelta", "ReasoningDelta")
_DICT_OVERHEAD = 160  # a waiting text delta's envelope, as an estimate of its line


class SlowClient(Exception):
    """The client's queue is over its bound of bytes (or of messages)."""


def _lazy(message: dict[str, Any]) -> bool:
    """Kept as a dict until written: what may still be merged or replaced."""
    if message.get("event") == "status":
        return True
    data = message.get("data")
    return message.get("event") == "turn" and isinstance(data, dict) and \
        data.get("$type") in _MERGEABLE


def _size(item: dict[str, Any] | bytes) -> int:
    if isinstance(item, bytes):
        return len(item)
    data = item.get("data")
    text = data.get("text") if isinstance(data, dict) else None
    return _DICT_OVERHEAD + (len(text) if isinstance(text, str) else 4096)


class Outbox:
    def __init__(self, max_pending: int = MAX_PENDING, max_bytes: int = MAX_PENDING_BYTES,
                 encode: Callable[[dict[str, Any]], bytes] = encode_line) -> None:
        self._queue: deque[dict[str, Any] | bytes] = deque()
        self._ready = asyncio.Event()
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.encode = encode
        self.pending_bytes = 0  # what waits, encoded lines exactly, text deltas estimated
        self.merged = 0  # how many messages were folded into a waiting one (for tests)
        self.closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        last = self._queue[-1] if self._queue else None
        if isinstance(last, dict) and self._merge(last, message):
            self.merged += 1
            self._over()
            return
        if message.get("event") == "status":
            for i, waiting in enumerate(self._queue):
                if isinstance(waiting, dict) and waiting.get("event") == "status":
                    self.pending_bytes += _size(message) - _size(waiting)
                    self._queue[i] = message
                    return
        if len(self._queue) >= self.max_pending:
            raise SlowClient(f"more than {self.max_pending:,} messages waited unread")
        item: dict[str, Any] | bytes = message if _lazy(message) else self.encode(message)
        self._queue.append(item)
        self.pending_bytes += _size(item)
        self._ready.set()
        self._over()

    def _over(self) -> None:
        if self.pending_bytes > self.max_bytes:
            raise SlowClient(f"more than {self.max_bytes // 2**20} MiB of answers waited unread")

    def _merge(self, last: dict[str, Any], new: dict[str, Any]) -> bool:
        if last.get("event") != "turn" or new.get("event") != "turn" or \
                last.get("turn") != new.get("turn"):
            return False
        a, b = last.get("data"), new.get("data")
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return False
        kind = a.get("$type")
        if kind not in _MERGEABLE or b.get("$type") != kind:
            return False
        before = _size(last)
        last["data"] = {"$type": kind, "text": str(a.get("text", "")) + str(b.get("text", ""))}
        last["seq"] = new.get("seq")
        self.pending_bytes += _size(last) - before
        return True

    async def get(self) -> bytes:
        """The next line to write (a waiting dict is encoded now)."""
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        item = self._queue.popleft()
        self.pending_bytes -= _size(item)
        return item if isinstance(item, bytes) else self.encode(item)

    def close(self) -> None:
        self.closed = True
        self._queue.clear()
        self.pending_bytes = 0


__all__ = ["MAX_OUT_BYTES", "MAX_PENDING", "MAX_PENDING_BYTES", "Outbox", "SlowClient"]
