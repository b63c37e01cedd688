"""One download in a thread, watched from asyncio: the service's download jobs and the
hub's queue iterate its progress without blocking their loop, and cancel it at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from core.hub.download import (
    CANCEL_GRACE_S,
    CHUNK_SIZE,
    CancelToken,
    DownloadProgress,
    DownloadResult,
    download_plan,
)
from core.hub.errors import HubError
from core.hub.listing import DownloadPlan
from core.hub.timeouts import hub_timeouts


class DownloadJob:
    """One download running in a thread, observed from asyncio without blocking the loop.

    `async for progress in job` yields throttled DownloadProgress snapshots and ends after
    the terminal one (done, error or cancelled); `await job.wait()` gives the result.

    A thread blocked in a socket read cannot be woken, so `cancel` does not wait for it:
    the job ends as cancelled at once (its partial file kept for a resume), and the
    thread stops by itself at its next read or timeout, its later news dropped. While no
    news comes the iterator says so itself: a progress with `stalled_s` set.
    """

    def __init__(self, plan: DownloadPlan, *, cache_dir: Path | None = None,
                 token: str | None = None, chunk_size: int | None = CHUNK_SIZE) -> None:
        self.plan = plan
        self._cache_dir = cache_dir
        self._token = token
        self._chunk_size = chunk_size
        self._cancel = CancelToken()
        self._queue: asyncio.Queue[DownloadProgress] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[DownloadResult] | None = None
        self.latest: DownloadProgress = DownloadProgress(
            plan.repo_id, plan.primary, 0, len(plan.files), 0, plan.total_bytes, 0.0, None,
            "queued")

    def start(self) -> DownloadJob:
        """Start the worker thread; call from the event loop."""
        if self._future is not None:
            return self
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._future = self._loop.create_future()
        threading.Thread(target=self._run, name=f"hub-download:{self.plan.repo_id}",
                         daemon=True).start()
        return self

    def cancel(self) -> None:
        """End the job as cancelled within CANCEL_GRACE_S, whatever its thread is doing.

        The thread usually stops at its next chunk and reports the exact bytes it kept;
        one stuck in a read (a stalled Hub) is not waited for: the job ends without it.
        The partial file stays for a later resume either way.
        """
        self._cancel.cancel()
        loop, fut = self._loop, self._future
        if loop is None or fut is None or fut.done():
            return  # not started: the thread, once started, stops before any request
        err = HubError("CANCELLED", f"Download of {self.plan.repo_id} cancelled; pull it again "
                       "to resume where it stopped.")

        def finish() -> None:
            if fut.done():
                return  # the thread reported its own end in time
            fut.set_result(DownloadResult(self.plan, None, err, 0))
            assert self._queue is not None
            self._queue.put_nowait(replace(self.latest, state="cancelled", error=err,
                                           rate_bps=0.0, eta_s=None, stalled_s=None))

        if _on_loop(loop):
            loop.call_later(CANCEL_GRACE_S, finish)
        else:
            loop.call_soon_threadsafe(loop.call_later, CANCEL_GRACE_S, finish)

    @property
    def started(self) -> bool:
        return self._future is not None

    def _emit(self, progress: DownloadProgress) -> None:
        assert self._loop is not None and self._queue is not None
        fut = self._future

        def put() -> None:
            if fut is not None and not fut.done():  # after a cancel: the thread's news is stale
                assert self._queue is not None
                self._queue.put_nowait(progress)

        try:
            self._loop.call_soon_threadsafe(put)
        except RuntimeError:  # the loop closed (app quit): nobody is listening any more
            pass

    def _run(self) -> None:
        result = download_plan(self.plan, cache_dir=self._cache_dir, token=self._token,
                               on_progress=self._emit, cancel=self._cancel,
                               chunk_size=self._chunk_size)
        assert self._loop is not None and self._future is not None
        fut = self._future
        try:
            self._loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(result))
        except RuntimeError:  # the loop closed while the download finished
            pass

    async def __aiter__(self) -> AsyncIterator[DownloadProgress]:
        self.start()
        assert self._queue is not None
        notice = hub_timeouts().stall_notice_s
        heard = time.monotonic()
        while True:
            try:
                progress = await asyncio.wait_for(self._queue.get(), timeout=min(notice, 1.0))
            except TimeoutError:
                silent = time.monotonic() - heard
                if self.latest.state != "downloading" or silent < notice:
                    continue
                stalled = (self.latest.stalled_s or 0.0) + silent
                yield replace(self.latest, stalled_s=stalled, rate_bps=0.0, eta_s=None)
                continue
            heard = time.monotonic()
            self.latest = progress
            yield progress
            if progress.finished:
                return

    async def wait(self) -> DownloadResult:
        self.start()
        assert self._future is not None
        return await self._future


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
