"""ClusterBackend: a cluster's rank 0 streamed through the remote backend (core.remote), with
the cluster's own sentence when a rank dies mid-reply.

Every event, tool-call parse, reasoning split, cancel and bound is the remote backend's;
this only swaps the message of a reply that ended because the cluster went down ("the
connection was lost") for the one that says which host died and what it logged last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from core.engines.base import GenerationRequest
from core.events import Error, Event
from core.remote import Backend

# How long a failed reply waits for the watcher to name the rank that died: mlx.launch
# stops rank 0 (which drops the connection) about as soon as another rank exits.
NAMING_WAIT_S = 6.0


class ClusterBackend:
    kind = "remote"

    def __init__(self, inner: Backend, name: str,
                 failure: Callable[[float], Awaitable[str | None]]) -> None:
        self.inner = inner
        self.name = name
        self.failure = failure  # waits up to N s for the sentence of the cluster's end

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        events = self.inner.generate(request)
        try:
            async for event in events:
                if isinstance(event, Error):
                    sentence = await self.failure(NAMING_WAIT_S)
                    if sentence:
                        event = Error(event.code, f"{sentence} The reply so far was kept.")
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    def cancel(self, request_id: str) -> None:
        self.inner.cancel(request_id)

    def ready(self) -> bool:
        return self.inner.ready()

    def queued(self) -> int:
        return self.inner.queued()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "cluster": self.name}

    async def close(self) -> None:
        await self.inner.close()
