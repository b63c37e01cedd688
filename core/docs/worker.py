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
import contextlib
import os
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.docs.budget import EXIT_OVER_MEMORY, EXIT_OVER_TIME, GRACE_S, ReadBounds
from core.docs.errors import DocError
from core.docs.retrieval import IngestResult
from core.lazy_numpy import np  # numpy loads on first use (start-up)
from core.workers.on_demand import READY, OnDemandProcess, serve

DEFAULT_IDLE_S = 120.0
PROGRESS = "progress"
PROGRESS_EVERY_S = 0.1
DEADLINE_SLACK_S = 10.0  # past the worker's own limit and grace: the app's deadline


class UtilityWorkerError(Exception):
    """The utility process could not do the work (it crashed or did not start)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the worker process ------------------------------------------------------------------


def _op_ingest(state: dict[str, Any], path: str, options: dict[str, Any]) -> Any:
    from core.docs.retrieval import ingest

    return ingest(path, embedder=_embedder(state), progress=state.get("progress"),
                  bounds=state["bounds"], **options)


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
    the last step, so the bar reaches 100%). A bounded read calls it from its watchdog
    thread too (the pulse), through budget's lock: one message on the pipe at a time."""
    last = [0.0]

    def send(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or done >= total:
            last[0] = now
            conn.send((PROGRESS, request_id, stage, done, total))

    return send


def utility_main(conn: Connection, parent_pid: int, model_dir: str | None,
                 bounds: ReadBounds | None = None) -> None:
    """Entry point of the utility process: answer requests until told to stop."""
    from core.docs.embeddings import enter_offline_mode, limit_heap_growth
    from core.workers.bootstrap import start_child

    start_child(log_name="worker")
    enter_offline_mode()
    limit_heap_growth()  # before torch allocates: its batches would grow the heap for good
    state: dict[str, Any] = {"model_dir": Path(model_dir) if model_dir else None,
                             "bounds": bounds or ReadBounds()}

    def handle(request_id: int, op: str, args: tuple) -> None:
        state["progress"] = _progress_sender(conn, request_id)
        conn.send((request_id, True, _OPS[op](state, *args)))

    serve(conn, parent_pid, handle, lambda request_id, error: (request_id, False, error))


# -- the app side --------------------------------------------------------------------------


class UtilityWorker(OnDemandProcess):
    """Spawns the utility process on demand, routes requests, stops it when idle.

    Lives on the app's asyncio loop (core.workers.on_demand): waiting for a 200-page PDF
    never blocks the screen.
    """

    process_name = "llmdeck-utility"

    def __init__(
        self,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        start_timeout_s: float = 120.0,
        model_dir: str | Path | None = None,
        read_bounds: ReadBounds | None = None,
    ) -> None:
        super().__init__(idle_s=idle_s, start_timeout_s=start_timeout_s)
        self.model_dir = str(model_dir) if model_dir else None
        # Memory and time one document's reading may take (core.docs.budget); read when
        # the process starts, so a change applies from the next start.
        self.read_bounds = read_bounds or ReadBounds()

    def _child(self) -> tuple[Any, tuple]:
        return utility_main, (self.model_dir, self.read_bounds)

    @property
    def label(self) -> str:
        """How the memory budget's sentences and F4 name it."""
        return "The document reader (MiniLM embeddings)"

    def _memory_need(self):
        from core.docs.embeddings import ensure_model_files
        from core.workers.memory_budget import weights_need

        return weights_need(self.model_dir or ensure_model_files())

    def _refused_error(self, message: str) -> Exception:
        return UtilityWorkerError("OOM", message)

    def _dispatch(self, msg: tuple) -> None:
        if msg[0] == READY:
            self._started(msg[1])
            return
        if msg[0] == PROGRESS:
            callback = self._listener(msg[1])
            if callback is not None:
                callback(*msg[2:])
            return
        request_id, ok, value = msg
        if ok:
            self._resolve(request_id, value)
        else:
            self._reject(request_id,
                         UtilityWorkerError("INTERNAL", f"The document reader failed: {value}"))

    # -- its sentences -------------------------------------------------------------------------
    def _start_timeout_error(self) -> Exception:
        return UtilityWorkerError(
            "TIMEOUT",
            f"The document reader did not start within {self.start_timeout_s:.0f} s; "
            "check free memory and try again.",
        )

    def _crashed_error(self, exitcode: int | None) -> Exception:
        if exitcode == EXIT_OVER_TIME:
            return UtilityWorkerError(
                "TIMEOUT",
                f"reading it took longer than {self.read_bounds.seconds:.0f} s, the limit for "
                "one document, so the document reader stopped; attach a smaller part of it.",
            )
        if exitcode == EXIT_OVER_MEMORY:
            return UtilityWorkerError(
                "OOM",
                f"reading it needed more than the {self.read_bounds.memory_bytes >> 20} MB of "
                "memory a document may use, so the document reader stopped; attach a smaller "
                "part of it.",
            )
        return UtilityWorkerError(
            "WORKER_CRASHED",
            "The document reader stopped unexpectedly"
            + (f" (exit code {exitcode})" if exitcode is not None else "")
            + "; the file may be too large for free memory. Try again or attach a smaller file.",
        )

    def _closing_error(self) -> Exception:
        return UtilityWorkerError("CANCELLED", "The app is closing; attach again later.")

    def _not_running_error(self) -> Exception:
        return UtilityWorkerError("WORKER_CRASHED", "The document reader is not running.")

    def _send_failed_error(self) -> Exception:
        return UtilityWorkerError("WORKER_CRASHED", "The document reader stopped; try again.")

    def _cancelled_for_other_error(self) -> Exception:
        return UtilityWorkerError(
            "CANCELLED", "The document reader was stopped to cancel another file; attach again.")

    async def shutdown(self, *, final: bool = True) -> None:
        """Stop the process (politely, then by force); `final` refuses later calls."""
        self._closing = self._closing or final
        if not final:
            await self.unload()  # does nothing if work arrived while the idle timer fired
            return
        if self.process is None:
            return
        self._fail_pending(self._closing_error())
        await self._stop_politely()

    # -- requests ------------------------------------------------------------------------------
    async def call(self, op: str, *args: Any, progress: Any = None) -> Any:
        """Run operation `op` in the utility process; raises UtilityWorkerError.

        Cancelling the caller stops the work: the process is killed (a hostile file can
        hold it inside a converter's C code, where nothing cooperative would reach it),
        other requests in flight fail with CANCELLED, and the next call starts afresh."""
        return await self._request(op, args, listener=progress)

    async def ingest(self, path: str | Path, *, progress: Any = None,
                     **options: Any) -> IngestResult | DocError:
        """Extract (and for a large file chunk and embed) `path` in the utility process;
        `progress(stage, done, total)` is called on the loop as the work goes.

        The reading has a deadline here too, on the app's side: the worker bounds its own
        reading (core.docs.budget), but a converter holding Python's lock inside C code
        keeps the worker from even noticing its own time. Past the read limit plus a
        grace, while the file is still being read (no "embedding" progress yet), the
        worker is killed, as a cancel does, and the read is refused with TIMEOUT."""
        stage = ["reading"]

        def listen(name: str, done: int, total: int) -> None:
            stage[0] = name
            if progress is not None:
                progress(name, done, total)

        if self._closing:
            raise self._closing_error()
        await self._ensure_started()  # the deadline counts from a running worker
        work = asyncio.ensure_future(self.call("ingest", str(path), options, progress=listen))
        deadline = self.read_bounds.seconds + GRACE_S + DEADLINE_SLACK_S
        try:
            done, _ = await asyncio.wait({work}, timeout=deadline)
            while not done and stage[0] == "embedding":  # the reading is over: no deadline
                done, _ = await asyncio.wait({work}, timeout=deadline)
        finally:
            if not work.done():
                work.cancel()  # a cancel of ours or of the caller: the worker is killed
                with contextlib.suppress(asyncio.CancelledError, UtilityWorkerError):
                    await work
        if not done:
            raise self._crashed_error(EXIT_OVER_TIME)
        return work.result()

    async def encode(self, texts: list[str]) -> np.ndarray:
        """MiniLM unit vectors for `texts` (an (n, 384) float32 matrix)."""
        return await self.call("encode", list(texts))

    async def ping(self) -> dict[str, Any]:
        return await self.call("ping")

    def status(self):
        """A WorkerStatus row for the status pane (None while no process runs)."""
        from core.workers.status import WorkerStatus

        pid = self.pid
        if pid is None:
            return None
        rss = self.rss_bytes()
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
            **self.budget_fields(),
        )

