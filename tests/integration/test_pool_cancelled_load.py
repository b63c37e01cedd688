"""A load whose caller went away, then the pool's close, leaves nothing behind to log.

The load runs as its own task (other requests may wait on the same load); cancelling the
caller leaves it running, and the close then fails it (its worker is stopped mid-load).
Before, nobody read that failure, and asyncio logged "Task exception was never retrieved"
with a traceback when the task was collected, on every quit during a load.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from core.engines.base import ModelSpec
from core.workers.pool import WorkerPool
from tests.helpers.procs import wait_gone


async def test_a_cancelled_load_then_close_logs_nothing(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    reports: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reports.append(str(context.get("message"))))
    pool = WorkerPool()
    try:
        spec = ModelSpec(str(tmp_path / "m"), "scripted", options=(("hang_load_s", 30),))
        load = asyncio.ensure_future(pool.load("chat", spec))
        while not pool.pids():  # the worker is up and loading
            await asyncio.sleep(0.02)
        pids = pool.pids()
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        await pool.shutdown()
        assert wait_gone(pids, 5.0) == []
        del load
        for _ in range(3):
            await asyncio.sleep(0.05)
            gc.collect()
        assert not [r for r in reports if "never retrieved" in r], reports
    finally:
        loop.set_exception_handler(previous)
        await pool.shutdown()
