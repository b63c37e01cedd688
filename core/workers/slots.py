"""A worker's request slots, the person's turns first (issue 45 item 3).

The app and `serve` share one pool, so a burst of API requests (an editor's agent, a
batch script) would queue ahead of the person typing in the app. A request marked
interactive (the app's turns) takes the next free slot before any API request waiting
for it; while a person waits, API requests still get a bounded share (one grant in
API_EVERY + 1), so a busy app never starves the API. Without interactive waiters the
order is first come, first served, as asyncio.Semaphore's.

An engine that runs one reply at a time but sets a running reply aside for a person's
turn (llama.cpp: core.engines.turn_order) gets `spare` slots only interactive requests
may take: the person's turn reaches the engine while every slot is held by API
requests, and the engine serves it at its next token boundary.
"""

from __future__ import annotations

import asyncio
from collections import deque

API_EVERY = 3  # while both wait: after this many interactive grants in a row, one API grant


class PrioritySlots:
    """`acquire(interactive)` / `release()`, like a semaphore of `size` slots
    (plus `spare` that only interactive requests take)."""

    def __init__(self, size: int = 1, spare: int = 0) -> None:
        self._size = max(1, size)
        self._spare = max(0, spare)
        self._held = 0
        self._waiters: deque[tuple[asyncio.Future[bool], bool]] = deque()
        self._interactive_run = 0  # interactive grants since the last API one, both waiting

    def _fits(self, interactive: bool) -> bool:
        return self._held < self._size + (self._spare if interactive else 0)

    async def acquire(self, interactive: bool = False) -> bool:
        ahead = any(i for _, i in self._waiters) if interactive else bool(self._waiters)
        if self._fits(interactive) and not ahead:
            self._held += 1
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
        self._held = max(0, self._held - 1)
        while self._waiters:
            entry = self._choose()
            if entry is None:
                return
            self._drop(entry)
            if entry[0].done():
                continue  # cancelled while it waited
            self._held += 1
            entry[0].set_result(True)

    def waiting(self) -> tuple[int, int]:
        """(interactive, API) requests waiting for a slot."""
        people = sum(1 for _, interactive in self._waiters if interactive)
        return people, len(self._waiters) - people

    def _choose(self) -> tuple[asyncio.Future[bool], bool] | None:
        """The next waiter to grant a slot (None: none that fits); cancelled ones first,
        to be dropped."""
        gone = next((e for e in self._waiters if e[0].done()), None)
        if gone is not None:
            return gone
        person = next((e for e in self._waiters if e[1]), None) if self._fits(True) else None
        api_waiting = next((e for e in self._waiters if not e[1]), None)
        api = api_waiting if self._fits(False) else None
        if api is None:  # only a spare slot is free, or no API request waits
            if api_waiting is None:
                self._interactive_run = 0
            return person
        if person is None:
            self._interactive_run = 0
            return api
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
