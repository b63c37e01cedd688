"""Backend: where the Runtime's (and the server's) generations come from.

The Runtime never needs to know whether tokens come from a local worker process or a
GPU box across the network; both stand behind this protocol and yield the same
core.events, ending with Done. `PoolBackend` adapts the WorkerPool; `RemoteBackend`
(core.remote.client) speaks to any OpenAI-compatible server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from core.engines.base import GenerationRequest
from core.events import Event
from core.workers.pool import WorkerPool


@runtime_checkable
class Backend(Protocol):
    """A source of generations for one model."""

    kind: str  # "local" | "remote"

    def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """Stream the request's events; always ends with Done."""
        ...

    def cancel(self, request_id: str) -> None: ...

    def ready(self) -> bool:
        """True when a request can start now (a local model is loaded)."""
        ...

    def queued(self) -> int:
        """Requests waiting for a free slot (the server answers 429 past its limit)."""
        ...

    def describe(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


def event_batches(backend: Backend, request: GenerationRequest) -> AsyncIterator[list[Event]]:
    """The request's events in lists of whatever was already queued when the consumer
    asked: a consumer that falls behind catches up in one step instead of one per token
    (the server merges such a backlog into one chunk). Backends without a queue of their
    own give one event per list."""
    native = getattr(backend, "generate_batches", None)
    if native is not None:
        return native(request)
    return _one_by_one(backend.generate(request))


async def _one_by_one(events: AsyncIterator[Event]) -> AsyncIterator[list[Event]]:
    try:
        async for event in events:
            yield [event]
    finally:
        await events.aclose()  # type: ignore[attr-defined]


class PoolBackend:
    """The model loaded under `key` in a WorkerPool (shared by the TUI and the server)."""

    kind = "local"

    def __init__(self, pool: WorkerPool, key: str) -> None:
        self.pool = pool
        self.key = key

    def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        return self.pool.generate(self.key, request)

    def generate_batches(self, request: GenerationRequest) -> AsyncIterator[list[Event]]:
        return self.pool.generate_batches(self.key, request)

    def cancel(self, request_id: str) -> None:
        self.pool.cancel(request_id)

    def ready(self) -> bool:
        return self.key in self.pool.loaded()

    def queued(self) -> int:
        return self.pool.queued(self.key)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key}

    async def close(self) -> None:
        """The pool belongs to the Runtime, which shuts it down itself."""
