"""A client's outgoing queue: bounded, and merging stream text when the client lags.

The service never waits for a client: events go into this queue and one writer task per
client drains it. While a line waits unsent, the next text delta of the same turn and
kind is merged into it (one message with the joined text, the later seq), so a slow
reader gets fewer, larger messages instead of one per token and the queue does not grow
with the reply. Status pushes replace the waiting one. What cannot be merged (results,
tool statuses) counts against MAX_PENDING; past it the client is dropped as too slow.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

MAX_PENDING = 2_000
_MERGEABLE = ("TextDelta", "ReasoningDelta")


class SlowClient(Exception):
    """The client's queue is over MAX_PENDING messages that could not be merged."""


class Outbox:
    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self._queue: deque[dict[str, Any]] = deque()
        self._ready = asyncio.Event()
        self.max_pending = max_pending
        self.merged = 0  # how many messages were folded into a waiting one (for tests)
        self.closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if self._queue and self._merge(self._queue[-1], message):
            self.merged += 1
            return
        if message.get("event") == "status":
            for i, waiting in enumerate(self._queue):
                if waiting.get("event") == "status":
                    self._queue[i] = message
                    return
        if len(self._queue) >= self.max_pending:
            raise SlowClient(f"more than {self.max_pending:,} messages waited unread")
        self._queue.append(message)
        self._ready.set()

    @staticmethod
    def _merge(last: dict[str, Any], new: dict[str, Any]) -> bool:
        if last.get("event") != "turn" or new.get("event") != "turn" or \
                last.get("turn") != new.get("turn"):
            return False
        a, b = last.get("data"), new.get("data")
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return False
        kind = a.get("$type")
        if kind not in _MERGEABLE or b.get("$type") != kind:
            return False
        last["data"] = {"$type": kind, "text": str(a.get("text", "")) + str(b.get("text", ""))}
        last["seq"] = new.get("seq")
        return True

    async def get(self) -> dict[str, Any]:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    def close(self) -> None:
        self.closed = True
        self._queue.clear()
