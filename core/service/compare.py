"""Compare over the socket: the service runs core.runtime.compare for a client and streams its
two replies as two turn streams ("<id>.0" the chat model, "<id>.1" the other), so the
client's outbox merges their text when it lags, exactly as for a reply.

A comparison is the service's once started: a client that goes away leaves it to finish
and be stored (both replies, as siblings), as a reply goes on without its terminal.
Kept here, per runtime, until one side is kept; at most MAX_KEPT at once (the oldest
finished go first).
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from typing import Any

from core.service import codec

MAX_KEPT = 16


class Comparisons:
    """The comparisons a service runs, by id."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._running: dict[str, Any] = {}  # id -> core.runtime.compare.Comparison
        self._pumps: set[asyncio.Task[None]] = set()

    def add(self, comparison: Any, caller: Any) -> str:
        while len(self._running) >= MAX_KEPT:
            done = [k for k, c in self._running.items() if c.finished]
            self._running.pop(done[0] if done else next(iter(self._running)))
        compare_id = f"cmp{next(self._ids)}"
        self._running[compare_id] = comparison
        task = asyncio.ensure_future(_pump(compare_id, comparison, caller))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        return compare_id

    def get(self, compare_id: Any) -> Any:
        return self._running.get(compare_id) if isinstance(compare_id, str) else None

    def drop(self, compare_id: str) -> None:
        self._running.pop(compare_id, None)


_by_runtime: weakref.WeakKeyDictionary[Any, Comparisons] = weakref.WeakKeyDictionary()


def comparisons_of(runtime: Any) -> Comparisons:
    found = _by_runtime.get(runtime)
    if found is None:
        found = _by_runtime[runtime] = Comparisons()
    return found


async def _pump(compare_id: str, comparison: Any, caller: Any) -> None:
    """Both sides' events to the caller, each side as its own turn stream; the two
    turn_end lines (with the stored message ids) once both are stored."""
    from core.events import Error

    seq = itertools.count(1)
    async for item in comparison.events():
        try:
            data = codec.encode(item.event)
        except codec.CodecError as exc:
            data = codec.encode(Error("INTERNAL", str(exc)))
        caller.send({"event": "turn", "turn": f"{compare_id}.{item.side}", "seq": next(seq),
                     "data": data})
    for index, side in enumerate(comparison.sides):
        caller.send({"event": "turn_end", "turn": f"{compare_id}.{index}",
                     "assistant_message_id": side.message_id,
                     "finish_reason": side.finish_reason})
