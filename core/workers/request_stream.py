"""The events of one request on their way from its worker to its consumer.

A deque and one waiter future: cheaper per token than asyncio.Queue, which matters when
one worker step fans out to dozens of streams. The pool ends a stream itself (cancel,
unload, shutdown) with the events already queued kept in front.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from core.engines.base import GenerationRequest
from core.events import Event


class RequestStream:
    """Events of one request on their way to its consumer."""

    __slots__ = ("items", "waiter", "done", "request", "worker")

    def __init__(self, request: GenerationRequest | None = None) -> None:
        self.items: deque[Event] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.done = False
        self.request = request  # kept to say which request a crash happened on
        self.worker: Any = None  # the WorkerProcess it runs on, once it does (for cancel)

    def put(self, event: Event) -> None:
        self.items.append(event)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self, *events: Event) -> None:
        """Close the stream from the app side (cancel, unload, shutdown): the events
        already queued stay in front, so the text so far reaches the consumer."""
        if self.done:
            return
        for event in events:
            self.put(event)
        self.done = True

    async def get_all(self) -> list[Event]:
        """Everything queued, in order; waits only when nothing is. A consumer that fell
        behind gets the backlog at once (the server merges it into fewer chunks)."""
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        items = list(self.items)
        self.items.clear()
        return items
