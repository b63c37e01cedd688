"""A cluster as a Runtime's model (the app's chat model, `llmdeck serve --model
cluster:NAME`): started when it is chosen, streamed from like a remote, stopped after
`idle_minutes` with no request, and on close.

core.runtime's model lifecycle calls `open_backend(settings, name)` for "cluster:NAME" and
uses what it returns as any Backend. Why a backend and not a one-off start: the cluster
costs every host's memory, so one that nobody talks to should not hold it; the backend
sees every request, so it knows when the last one ended. After an idle stop `ready()` is
False and the lifecycle's next `ensure()` starts the cluster again (the model line shows
it loading). A cluster `llmdeck cluster up` left running is used as it is and never
stopped from here: it belongs to whoever started it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from core.cluster.backend import ClusterBackend
from core.cluster.launch import current
from core.cluster.serving import CLUSTER_PREFIX, SERVED_MODEL, ClusterRun, up_or_running
from core.config import ClusterConfig, RemoteEndpoint, Settings
from core.engines.base import GenerationRequest
from core.events import Done, Error, Event

MIN_CHECK_S = 0.2
MAX_CHECK_S = 5.0


class IdleStop:
    """Calls `stop` once `idle_s` pass with no request running; a request in flight is never
    cut (`begin`/`end` bracket each one). idle_s <= 0: never."""

    def __init__(self, idle_s: float, stop: Any) -> None:
        self.idle_s = idle_s
        self.stop = stop  # an async callable
        self.busy = 0
        self.last = time.monotonic()
        self.stopped = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.idle_s > 0:
            self._task = asyncio.ensure_future(self._watch())

    def begin(self) -> None:
        self.busy += 1
        self.last = time.monotonic()

    def end(self) -> None:
        self.busy -= 1
        self.last = time.monotonic()

    def idle_for(self) -> float:
        return 0.0 if self.busy else time.monotonic() - self.last

    async def _watch(self) -> None:
        check = min(MAX_CHECK_S, max(MIN_CHECK_S, self.idle_s / 10))
        while not self.stopped:
            await asyncio.sleep(check)
            if self.idle_for() >= self.idle_s:
                self.stopped = True  # set before awaiting: a request arriving now sees it
                await self.stop()
                return

    async def close(self) -> None:
        """End the watch; a stop already under way is waited for, not cut (a cut one would
        leave its ranks to a second stop racing the first)."""
        task = self._task
        if task is None or task.done() or task is asyncio.current_task():
            return
        if self.stopped:
            await asyncio.shield(task)
        else:
            task.cancel()


class OnDemandClusterBackend:
    """The app's backend for "cluster:NAME": rank 0 through the remote backend (ClusterBackend
    names the host of a rank that dies), with the idle stop around it."""

    kind = "remote"

    def __init__(self, cfg: ClusterConfig, run: ClusterRun, inner: ClusterBackend) -> None:
        self.cfg = cfg
        self.run = run
        self.inner = inner
        self.idle = IdleStop(cfg.idle_minutes * 60.0 if run.cluster is not None else 0.0,
                             self._stop_idle)
        self.idle_stopped = False

    async def _stop_idle(self) -> None:
        if self.run.cluster is not None:
            await self.run.cluster.down(reason="idle")
        self.idle_stopped = True

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        if self.idle.stopped:  # stopped between the turn's ensure() and now
            yield Error("WORKER_CRASHED", (
                f"Cluster {self.cfg.name!r} was stopped after {self.cfg.idle_minutes:g} "
                "minutes with no request; send the message again to start it."))
            yield Done("error")
            return
        self.idle.begin()
        try:
            async for event in self.inner.generate(request):
                yield event
        finally:
            self.idle.end()

    @property
    def asleep(self) -> bool:
        """Stopped (or stopping) after its idle time, not by a failure or `cluster down`:
        serve starts it again for the next request instead of refusing it."""
        return self.idle.stopped

    def cancel(self, request_id: str) -> None:
        self.inner.cancel(request_id)

    def ready(self) -> bool:
        """False once the cluster is stopped (idle, a rank died, or `cluster down`): the
        lifecycle then starts it again."""
        if self.idle.stopped:
            return False
        if self.run.cluster is not None:
            return self.run.cluster.state.state == "up"
        state = current(self.cfg.name)
        return state is not None and state.state == "up"

    def queued(self) -> int:
        return self.inner.queued()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "engine": "cluster", "url": self.run.url,
                "idle_minutes": self.cfg.idle_minutes}

    async def close(self) -> None:
        """Stop every rank this process started (each pid checked by Cluster.down)."""
        await self.idle.close()
        await self.inner.close()
        if not self.idle_stopped:
            await self.run.close()


async def open_backend(settings: Settings, name: str) -> OnDemandClusterBackend:
    """Start the cluster `name` (or use the one already up) and return its backend. Settings
    are left as they are (the chat model stays "cluster:NAME"). A cluster that cannot
    start raises ClusterError with its sentence."""
    run = await up_or_running(settings, name)  # raises for an unknown name
    cfg = settings.cluster(name)
    assert cfg is not None
    from core.remote.client import RemoteBackend

    endpoint = RemoteEndpoint(name=f"{CLUSTER_PREFIX}{name}", url=run.url)
    failure = run.cluster.wait_failure if run.cluster is not None else run.ended
    inner = ClusterBackend(RemoteBackend(endpoint, SERVED_MODEL), name, failure)
    backend = OnDemandClusterBackend(cfg, run, inner)
    backend.idle.start()
    return backend
