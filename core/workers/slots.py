"""A worker's request slots, the person's turns first (issue 45 item 3).

The app and `serve` share one pool, so a burst of API requests (an editor's agent, a
batch script) would queue ahead of the person typing in the app. A request marked
interactive (the app's turns) takes the next free slot before any API request waiting
for it; while a person waits, API requests still get a bounded share (one grant in
API_EVERY + 1), so a busy app never starves the API. Without interactive waiters the
order is first come, first served, as asyncio.Semaphore's.
"""

from __future__ import annotations

import asyncio
from collections import deque

API_EVERY = 3  # while both wait: after this many interactive grants in a row, one API grant


class PrioritySlots:
    """`acquire(interactive)` / `release()`, like a semaphore of `size` slots."""

    def __init__(self, size: int = 1) -> None:
        self._free = max(1, size)
        self._waiters: deque[tuple[asyncio.Future[bool], bool]] = deque()
        self._interactive_run = 0  # interactive grants since the last API one, both waiting

    async def acquire(self, interactive: bool = False) -> bool:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        entry = (asyncio.get_running_loop().create_future(), interactive)
        self._waiters.append(entry)
        try:
            await entry[0]
        except asyncio.CancelledError:
            if entry[0].done() and not entry[0].cancelled():
                self.release()  # granted as it was cancelled: the slot goes to the next
            else:
                self._drop(entry)
            raise
        return True

    def release(self) -> None:
        self._free += 1
        while self._free > 0 and self._waiters:
            entry = self._choose()
            self._drop(entry)
            if entry[0].done():
                continue  # cancelled while it waited
            self._free -= 1
            entry[0].set_result(True)

    def waiting(self) -> tuple[int, int]:
        """(interactive, API) requests waiting for a slot."""
        people = sum(1 for _, interactive in self._waiters if interactive)
        return people, len(self._waiters) - people

    def _choose(self) -> tuple[asyncio.Future[bool], bool]:
        person = next((e for e in self._waiters if e[1] and not e[0].done()), None)
        api = next((e for e in self._waiters if not e[1] and not e[0].done()), None)
        if person is None or api is None:
            self._interactive_run = 0
            return person or api or self._waiters[0]
        if self._interactive_run >= API_EVERY:
            self._interactive_run = 0
            return api
        self._interactive_run += 1
        return person

    def _drop(self, entry: tuple[asyncio.Future[bool], bool]) -> None:
        try:
            self._waiters.remove(entry)
        except ValueError:
            pass
