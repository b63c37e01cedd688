"""The idle watch: each model unloads at its keep-alive after its last reply.

A model's keep-alive (Ollama's meaning: seconds, < 0 for ever, 0 as soon as its last
reply ends; None takes the pool's idle_unload_s) sets a deadline from its last use. One
task sleeps until the nearest deadline (at most 5 s, so a changed default is seen) and
unloads each idle model whose deadline has passed; a model with leases is never idle.
The task starts only once some model can unload by itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

MAX_SLEEP_S = 5.0


class Unloadable(Protocol):
    """A model group as the idle watch sees it."""

    keep_alive_s: float | None
    workers: list

    def idle(self) -> bool: ...

    def idle_deadline(self, default_s: float | None) -> float | None: ...


class IdleUnloader:
    """Runs the idle watch for the pool; `wake` when a deadline may have moved."""

    def __init__(self, groups: Callable[[], Iterable[Unloadable]],
                 unload: Callable[[Unloadable], Awaitable[None]],
                 default_s: Callable[[], float | None], closing: Callable[[], bool]) -> None:
        self._groups = groups
        self._unload = unload
        self._default_s = default_s  # the pool's idle_unload_s, read each round
        self._closing = closing
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    def ensure(self) -> None:
        """Start the watch once some model can unload by itself."""
        timed = self._default_s() or any(
            g.keep_alive_s is not None and g.keep_alive_s >= 0 for g in self._groups())
        if timed and self._task is None and not self._closing():
            self._task = asyncio.ensure_future(self._watch())

    def wake(self) -> None:
        fut, self._wake = self._wake, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        """Unload each idle model at its deadline (its keep-alive after its last reply)."""
        while not self._closing():
            now = time.monotonic()
            deadlines = []
            for group in list(self._groups()):
                deadline = group.idle_deadline(self._default_s())
                if deadline is None or not group.workers:
                    continue
                if deadline <= now and group.idle():
                    await self._unload(group)
                elif deadline > now:
                    deadlines.append(deadline)
            sleep = min([MAX_SLEEP_S, *(d - time.monotonic() for d in deadlines)])
            self._wake = wake = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(wake, max(0.02, sleep))
            except TimeoutError:
                pass
