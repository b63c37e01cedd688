"""Warming an opened conversation's KV cache (issue 33 item 2).

When the person opens a conversation, the local model's worker may load its stored KV
cache (core.engines.kv_mlx) into memory while they read and type, so the next turn does
not prefill the history again. This is a hint and nothing more: fire and forget, nothing
waits for it, nothing is shown, a model is never loaded for it (one already loading, as
at the app's start, is waited for), and a failure only leaves the cache cold.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from core.engines.base import GenerationRequest
from core.runtime.models import ModelLifecycle
from core.workers.pool import WorkerPool

log = logging.getLogger(__name__)
POLL_S = 0.25

NextRequest = Callable[[str], Awaitable[GenerationRequest | None]]
"""The request a conversation's next turn will send, less its new message (or None)."""


class OpenWarmer:
    """The Runtime's warm-ups of opened conversations, one task per conversation."""

    def __init__(self, models: ModelLifecycle, pool: WorkerPool, next_request: NextRequest) -> None:
        self._models = models
        self._pool = pool
        self._next_request = next_request
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.closed = False

    def soon(self, conversation_id: str) -> None:
        """Warm the conversation's cache in the background (a no-op for a remote model,
        a model not loaded nor loading, or a warm-up of it already under way)."""
        models = self._models
        if (self.closed or conversation_id in self._tasks or models.backend.kind != "local"
                or not (models.state.state == "ready" or models.loading())):
            return
        task = asyncio.ensure_future(self._warm(conversation_id))
        self._tasks[conversation_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(conversation_id, None))

    async def _warm(self, conversation_id: str) -> None:
        try:
            if not await self._ready():
                return
            request = await self._next_request(conversation_id)
            if request is not None and not self.closed and self._ready_now():
                self._pool.warm(self._models.key, request)
        except Exception:  # only a cache left cold: never the person's concern
            log.debug("warming conversation %s failed", conversation_id, exc_info=True)

    def _ready_now(self) -> bool:
        return self._models.backend.kind == "local" and self._models.state.state == "ready"

    async def _ready(self) -> bool:
        """Wait out a load under way (never start one); False when it did not end ready."""
        deadline = time.monotonic() + self._pool.load_timeout_s
        while self._models.loading() and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            if self.closed:
                return False
        return self._ready_now()

    def close(self) -> None:
        """The Runtime closes: warm-ups under way stop."""
        self.closed = True
        for task in list(self._tasks.values()):
            task.cancel()
