"""The download queue behind the hub screen: one download at a time, in order.

Two multi-gigabyte pulls side by side each take twice as long and neither is usable
sooner, so jobs run one after another. The screen shows every job's latest progress and
can cancel any of them, running or waiting; updates arrive through one callback on the
event loop, which a Textual screen turns into messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from core.hub.download import DownloadProgress
from core.hub.download_job import DownloadJob
from core.hub.listing import DownloadPlan

OnUpdate = Callable[[DownloadJob, DownloadProgress], None]


class DownloadQueue:
    """FIFO of DownloadJobs; create it and call `add` from the running event loop."""

    def __init__(self, *, cache_dir: Path | None = None, token: str | None = None,
                 on_update: OnUpdate | None = None) -> None:
        self.jobs: list[DownloadJob] = []
        self._cache_dir = cache_dir
        self._token = token
        self._on_update = on_update
        self._pending: asyncio.Queue[DownloadJob] = asyncio.Queue()
        self._runner: asyncio.Task[None] | None = None

    def add(self, plan: DownloadPlan) -> DownloadJob:
        """Queue a download; it starts when the ones before it have finished."""
        job = DownloadJob(plan, cache_dir=self._cache_dir, token=self._token)
        self.jobs.append(job)
        self._pending.put_nowait(job)
        self._notify(job, job.latest)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run())
        return job

    def cancel(self, job: DownloadJob) -> None:
        """End a running job at once (a stalled one too), or a waiting one before it starts."""
        job.cancel()

    @property
    def active(self) -> DownloadJob | None:
        return next((j for j in self.jobs if j.started and not j.latest.finished), None)

    async def join(self) -> None:
        """Wait until every queued job has finished (tests and clean shutdown)."""
        while self._runner is not None and not self._runner.done():
            await asyncio.shield(self._runner)

    def _notify(self, job: DownloadJob, progress: DownloadProgress) -> None:
        if self._on_update is not None:
            self._on_update(job, progress)

    async def _run(self) -> None:
        while not self._pending.empty():
            job = self._pending.get_nowait()
            async for progress in job:
                self._notify(job, progress)
