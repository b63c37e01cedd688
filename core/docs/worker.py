"""The utility worker: markitdown extraction and MiniLM embedding in their own process.

Attaching a document parses files that may be large or hostile and runs a ~90 MB torch
model; neither belongs on the UI loop (it would freeze the screen) nor in a model worker
(it would stall decoding for every chat). So one spawned process does that work, started
on the first attachment or query that needs it and stopped again after `idle_s` without
requests: torch does not give memory back to the OS when a model is dropped, only the
process exit does. Like a model worker it dies with the app (PR_SET_PDEATHSIG on Linux,
a parent check elsewhere), so quitting or killing the app leaves nothing behind.

Requests are named operations (ingest, encode, ping), not pickled callables, so the
worker runs only what this module lists.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import multiprocessing as mp
import os
import time
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.docs.errors import DocError
from core.docs.retrieval import IngestResult
from core.lazy_numpy import np  # numpy loads on first use (start-up)

_CTX = mp.get_context("spawn")
_ALL: weakref.WeakSet[UtilityWorker] = weakref.WeakSet()
PARENT_CHECK_S = 0.5
DEFAULT_IDLE_S = 120.0
READY = "ready"
SHUTDOWN = "shutdown"
PROGRESS = "progress"
PROGRESS_EVERY_S = 0.1


class UtilityWorkerError(Exception):
    """The utility process could not do the work (it crashed or did not start)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the worker process ------------------------------------------------------------------


def _op_ingest(state: dict[str, Any], path: str, options: dict[str, Any]) -> Any:
    from core.docs.retrieval import ingest

    return ingest(path, embedder=_embedder(state), progress=state.get("progress"), **options)


def _op_encode(state: dict[str, Any], texts: list[str]) -> np.ndarray:
    return _embedder(state).encode(list(texts))


def _op_ping(state: dict[str, Any]) -> dict[str, Any]:
    embedder = state.get("embedder")
    return {"pid": os.getpid(), "model_loaded": bool(embedder and embedder.is_loaded)}


_OPS = {"ingest": _op_ingest, "encode": _op_encode, "ping": _op_ping}


def _embedder(state: dict[str, Any]):
    if "embedder" not in state:
        from core.docs.embeddings import Embedder

        # No idle timer in here: the parent stops the whole process when it is idle.
        state["embedder"] = Embedder(idle_seconds=0, model_path=state.get("model_dir"))
    return state["embedder"]


def _progress_sender(conn: Connection, request_id: int):
    """A `Progress` callback that tells the app, at most ten times a second (and always
    the last step, so the bar reaches 100%)."""
    last = [0.0]

    def send(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or done >= total:
            last[0] = now
            conn.send((PROGRESS, request_id, stage, done, total))

    return send


def utility_main(conn: Connection, parent_pid: int, model_dir: str | None) -> None:
    """Entry point of the utility process: answer requests until told to stop."""
    from core.docs.embeddings import enter_offline_mode
    from core.workers.bootstrap import parent_alive, start_child

    start_child(log_name="worker")
    enter_offline_mode()
    state: dict[str, Any] = {"model_dir": Path(model_dir) if model_dir else None}
    conn.send((READY, os.getpid()))
    try:
        while True:
            if not conn.poll(PARENT_CHECK_S):
                if not parent_alive(parent_pid):
                    return
                continue
            msg = conn.recv()
            if msg[0] == SHUTDOWN:
                return
            request_id, op, args = msg
            state["progress"] = _progress_sender(conn, request_id)
            try:
                conn.send((request_id, True, _OPS[op](state, *args)))
            except Exception as exc:  # noqa: BLE001 - reported to the caller, not fatal here
                conn.send((request_id, False, f"{type(exc).__name__}: {exc}"))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the app went away


# -- the app side --------------------------------------------------------------------------


class UtilityWorker:
    """Spawns the utility process on demand, routes requests, stops it when idle.

    Lives on the app's asyncio loop: the pipe and the process sentinel are watched with
    `add_reader`, so waiting for a 200-page PDF never blocks the screen.
    """

    def __init__(
        self,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        start_timeout_s: float = 120.0,
        model_dir: str | Path | None = None,
    ) -> None:
        self.idle_s = idle_s
        self.start_timeout_s = start_timeout_s
        self.model_dir = str(model_dir) if model_dir else None
        self.process: Any = None
        self.conn: Connection | None = None
        self.starts = 0  # processes started so far (status and tests)
        self.last_used = time.monotonic()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._progress: dict[int, Any] = {}  # request id -> Progress callback
        self._ids = itertools.count(1)
        self._ready: asyncio.Future[int] | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._closing = False
        _ALL.add(self)

    @property
    def pid(self) -> int | None:
        alive = self.process is not None and self.process.is_alive()
        return self.process.pid if alive else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    # -- lifecycle ---------------------------------------------------------------------------
    async def _ensure_started(self) -> None:
        if self._ready is not None:
            await asyncio.shield(self._ready)
            return
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        parent, child = _CTX.Pipe(duplex=True)
        self.process = _CTX.Process(
            target=utility_main,
            args=(child, os.getpid(), self.model_dir),
            name="llmdeck-utility",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.conn = parent
        self.starts += 1
        loop.add_reader(parent.fileno(), self._on_readable)
        loop.add_reader(self.process.sentinel, self._on_exit)
        ready = self._ready
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
        except TimeoutError:
            error = UtilityWorkerError(
                "TIMEOUT",
                f"The document reader did not start within {self.start_timeout_s:.0f} s; "
                "check free memory and try again.",
            )
            if not ready.done():  # callers waiting on the same start get the error too
                ready.set_exception(error)
                ready.exception()
            self._stop_now()
            raise error from None

    def _on_readable(self) -> None:
        try:
            while self.conn is not None and self.conn.poll():
                self._dispatch(self.conn.recv())
        except (EOFError, OSError):
            self._on_exit()

    def _dispatch(self, msg: tuple) -> None:
        if msg[0] == READY:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(msg[1])
            return
        if msg[0] == PROGRESS:
            callback = self._progress.get(msg[1])
            if callback is not None:
                callback(*msg[2:])
            return
        request_id, ok, value = msg
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(
                    UtilityWorkerError("INTERNAL", f"The document reader failed: {value}")
                )
        self._arm_idle()

    def _on_exit(self) -> None:
        """The process ended: fail what was waiting on it; the next call starts a new one."""
        if self.process is None:
            return
        code = self.process.exitcode
        self._detach()
        error = UtilityWorkerError(
            "WORKER_CRASHED",
            "The document reader stopped unexpectedly"
            + (f" (exit code {code})" if code is not None else "")
            + "; the file may be too large for free memory. Try again or attach a smaller file.",
        )
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved here: the caller gets it through wait_for
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._reset()

    def _detach(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for fd in (self._fileno(), self.process.sentinel if self.process else None):
            if fd is not None:
                try:
                    loop.remove_reader(fd)
                except (ValueError, OSError):
                    pass

    def _fileno(self) -> int | None:
        try:
            return self.conn.fileno() if self.conn is not None and not self.conn.closed else None
        except OSError:
            return None

    def _reset(self) -> None:
        if self.process is not None:
            self.process.join(timeout=0.5)
        if self.conn is not None:
            self.conn.close()
        self.process = None
        self.conn = None
        self._ready = None
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None

    def _arm_idle(self) -> None:
        self.last_used = time.monotonic()
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        if not self._pending and self.idle_s > 0 and not self._closing:
            loop = asyncio.get_running_loop()
            self._idle_handle = loop.call_later(self.idle_s, self._on_idle)

    def _on_idle(self) -> None:
        self._idle_handle = None
        if not self._pending and self.process is not None:
            task = asyncio.ensure_future(self.shutdown(final=False))
            task.add_done_callback(lambda t: t.exception())

    def _stop_now(self) -> None:
        self._detach()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        self._reset()

    async def shutdown(self, *, final: bool = True) -> None:
        """Stop the process (politely, then by force); `final` refuses later calls."""
        self._closing = self._closing or final
        if self.process is None:
            return
        if self._pending:
            if not final:
                return  # work arrived while the idle timer fired
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(
                        UtilityWorkerError("CANCELLED", "The app is closing; attach again later.")
                    )
            self._pending.clear()
        process = self.process
        self._detach()
        try:
            if self.conn is not None:
                self.conn.send((SHUTDOWN,))
        except OSError:
            pass
        deadline = time.monotonic() + 3.0
        while process.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._stop_now()

    def kill_now(self) -> None:
        """Synchronous last resort (atexit)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    # -- requests ------------------------------------------------------------------------------
    async def call(self, op: str, *args: Any, progress: Any = None) -> Any:
        """Run operation `op` in the utility process; raises UtilityWorkerError.

        Cancelling the caller stops the work: the process is killed (a hostile file can
        hold it inside a converter's C code, where nothing cooperative would reach it),
        other requests in flight fail with CANCELLED, and the next call starts afresh."""
        if self._closing:
            raise UtilityWorkerError("CANCELLED", "The app is closing; attach again later.")
        await self._ensure_started()
        if self.conn is None:
            raise UtilityWorkerError("WORKER_CRASHED", "The document reader is not running.")
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[request_id] = future
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        if progress is not None:
            self._progress[request_id] = progress
        try:
            self.conn.send((request_id, op, args))
        except OSError:
            self._pending.pop(request_id, None)
            self._progress.pop(request_id, None)
            self._on_exit()
            raise UtilityWorkerError(
                "WORKER_CRASHED", "The document reader stopped; try again."
            ) from None
        try:
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None:
                self._cancel_all()
            raise
        finally:
            self._progress.pop(request_id, None)

    def _cancel_all(self) -> None:
        """Kill the process to stop a cancelled request; the others fail with CANCELLED."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UtilityWorkerError(
                    "CANCELLED",
                    "The document reader was stopped to cancel another file; attach again."))
        self._pending.clear()
        self._stop_now()

    async def ingest(self, path: str | Path, *, progress: Any = None,
                     **options: Any) -> IngestResult | DocError:
        """Extract (and for a large file chunk and embed) `path` in the utility process;
        `progress(stage, done, total)` is called on the loop as the work goes."""
        return await self.call("ingest", str(path), options, progress=progress)

    async def encode(self, texts: list[str]) -> np.ndarray:
        """MiniLM unit vectors for `texts` (an (n, 384) float32 matrix)."""
        return await self.call("encode", list(texts))

    async def ping(self) -> dict[str, Any]:
        return await self.call("ping")

    def status(self):
        """A WorkerStatus row for the status pane (None while no process runs)."""
        from core.workers.pool import WorkerStatus

        pid = self.pid
        if pid is None:
            return None
        rss = 0
        try:
            import psutil

            rss = psutil.Process(pid).memory_info().rss
        except Exception:  # noqa: BLE001 - status is best effort
            rss = 0
        return WorkerStatus(
            worker_id="docs#1",
            model="documents (markitdown + MiniLM)",
            engine="utility",
            state="busy" if self._pending else "idle",
            pid=pid,
            rss_bytes=rss,
            active=len(self._pending),
            queued=0,
            tokens_per_s=0.0,
            restarts=max(0, self.starts - 1),
        )


@atexit.register
def _kill_leftovers() -> None:
    for worker in list(_ALL):
        worker.kill_now()
