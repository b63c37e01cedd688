"""A model that fails to load leaves the app's loop quiet: the dead worker's pipe and
process handle are no longer watched (they were, and an app whose model failed to load
spun a core at 100% until it quit: 15 CPU-seconds in one snapshot test)."""

from __future__ import annotations

import asyncio

import pytest

from core.engines.base import ModelSpec
from core.workers.load_error import WorkerLoadError
from core.workers.pool import WorkerPool
from core.workers.worker_process import WorkerProcess
from tests.helpers.procs import wait_gone


async def test_a_failed_load_leaves_no_busy_loop_and_no_retry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wakeups = 0
    on_exit = WorkerProcess._on_exit

    def counted(self: WorkerProcess) -> None:
        nonlocal wakeups
        wakeups += 1
        on_exit(self)

    monkeypatch.setattr(WorkerProcess, "_on_exit", counted)
    pool = WorkerPool()
    spawned: list[int] = []
    start = WorkerProcess._start

    async def recorded(self: WorkerProcess) -> None:
        try:
            await start(self)
        finally:
            if self.process is not None and self.process.pid:
                spawned.append(self.process.pid)

    monkeypatch.setattr(WorkerProcess, "_start", recorded)
    spec = ModelSpec(path="scripted", engine="scripted", options=(("fail_load", "BAD"),))
    try:
        with pytest.raises(WorkerLoadError):
            await pool.load("m", spec)
        for _ in range(2):  # the worker exits; a retry, were there one, starts and exits
            await asyncio.to_thread(wait_gone, list(spawned), 10)
            await asyncio.sleep(0.5)
        before = wakeups
        await asyncio.sleep(0.5)
        assert wakeups - before == 0, f"{wakeups - before} wake-ups in 0.5 s on a dead worker"
        assert len(spawned) == 1, "a load that failed is said, not retried in the background"
    finally:
        await pool.shutdown()
