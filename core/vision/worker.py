"""The vision worker: a vision-language model (the "vision" role) in its own process.

A text-only chat model cannot see, so a picture reaches it as a caption a vision model
wrote. That model is large and used rarely, so it is loaded on the first image that needs
it and unloaded after `idle_s` without work: the process exits, which is the only way MLX
and torch give all their memory back. Like every child it starts through
core.workers.bootstrap (dies with the app, quiet stdio, own process group).

Images travel as paths of stored files (core.vision.images), never as pixels. The worker
streams caption pieces back as it decodes, one image request at a time; text requests
of chat models run in their own workers and never wait on it.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import multiprocessing as mp
import os
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_CTX = mp.get_context("spawn")
_ALL: weakref.WeakSet[VisionWorker] = weakref.WeakSet()
PARENT_CHECK_S = 0.5
DEFAULT_IDLE_S = 180.0
READY, FAILED, DELTA, DONE, ERROR, SHUTDOWN = "ready", "failed", "delta", "done", "error", "stop"


class VisionError(Exception):
    """A caption could not be made; `message` is a sentence for the person."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the worker process ----------------------------------------------------------------------
def vision_main(conn: Connection, parent_pid: int, model_dir: str) -> None:
    """Entry point: load the model, then caption requests until told to stop."""
    from core.workers.bootstrap import parent_alive, start_child

    start_child(log_name="vision")
    try:
        from core.vision.vlm import load_vlm, stream_caption

        model, processor = load_vlm(model_dir)
    except Exception as exc:  # noqa: BLE001 - reported to the app as a load failure
        conn.send((FAILED, f"{type(exc).__name__}: {exc}"))
        return
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
            request_id, paths, prompt, max_tokens = msg
            try:
                pieces = []
                for piece in stream_caption(model, processor, paths, prompt, max_tokens):
                    pieces.append(piece)
                    conn.send((DELTA, request_id, piece))
                conn.send((DONE, request_id, "".join(pieces)))
            except Exception as exc:  # noqa: BLE001 - that request fails, the worker stays
                conn.send((ERROR, request_id, f"{type(exc).__name__}: {exc}"))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return


# -- the app side ------------------------------------------------------------------------------
class VisionWorker:
    """Starts the vision process on first use, routes caption requests, unloads when idle.

    Lives on the app's asyncio loop (the pipe and the process sentinel are watched with
    `add_reader`); `state` is what the worker pane shows: unloaded, loading, ready, busy
    or failed.
    """

    def __init__(self, model_dir: str | Path, *, idle_s: float = DEFAULT_IDLE_S,
                 load_timeout_s: float = 300.0) -> None:
        self.model_dir = str(model_dir)
        self.idle_s = idle_s
        self.load_timeout_s = load_timeout_s
        self.process: Any = None
        self.conn: Connection | None = None
        self.loads = 0  # processes started (tests and the bench count reloads)
        self.requests = 0  # captions asked of the process (tests: a caption is made once)
        self.error: str | None = None
        self._ready: asyncio.Future[int] | None = None
        self._pending: dict[int, tuple[asyncio.Future[str], Callable[[str], None] | None]] = {}
        self._ids = itertools.count(1)
        self._idle: asyncio.TimerHandle | None = None
        self._closing = False
        self._last_error = VisionError("INTERNAL", "")
        _ALL.add(self)

    @property
    def name(self) -> str:
        return Path(self.model_dir).name

    @property
    def pid(self) -> int | None:
        alive = self.process is not None and self.process.is_alive()
        return self.process.pid if alive else None

    @property
    def state(self) -> str:
        if self.process is None:
            return "failed" if self.error else "unloaded"
        if self._ready is not None and not self._ready.done():
            return "loading"
        return "busy" if self._pending else "ready"

    # -- lifecycle -----------------------------------------------------------------------------
    async def _ensure_loaded(self) -> None:
        if self._ready is not None:
            await asyncio.shield(self._ready)
            return
        loop = asyncio.get_running_loop()
        self._ready = ready = loop.create_future()
        self.error = None
        parent, child = _CTX.Pipe(duplex=True)
        self.process = _CTX.Process(target=vision_main, name="llmdeck-vision", daemon=True,
                                    args=(child, os.getpid(), self.model_dir))
        self.process.start()
        child.close()
        self.conn = parent
        self.loads += 1
        loop.add_reader(parent.fileno(), self._on_readable)
        loop.add_reader(self.process.sentinel, self._on_exit)
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.load_timeout_s)
        except TimeoutError:
            self._fail(VisionError("TIMEOUT", f"The vision model {self.name} did not load "
                                   f"within {self.load_timeout_s:.0f} s; check free memory."))
            raise self._last_error from None

    def _on_readable(self) -> None:
        try:
            while self.conn is not None and self.conn.poll():
                self._dispatch(self.conn.recv())
        except (EOFError, OSError):
            self._on_exit()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == READY:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(msg[1])
            self._arm_idle()
        elif kind == FAILED:
            self._fail(VisionError("LOAD_FAILED", f"The vision model {self.name} could not "
                                   f"be loaded ({msg[1]}); pick another in Settings."))
        elif kind == DELTA:
            entry = self._pending.get(msg[1])
            if entry is not None and entry[1] is not None:
                entry[1](msg[2])
        elif kind in (DONE, ERROR):
            future, _ = self._pending.pop(msg[1], (None, None))
            if future is not None and not future.done():
                if kind == DONE:
                    future.set_result(msg[2])
                else:
                    future.set_exception(VisionError(
                        "INTERNAL", f"The vision model could not describe the image: {msg[2]}"))
            self._arm_idle()

    def _on_exit(self) -> None:
        if self.process is None:
            return
        code = self.process.exitcode
        if self._closing or (self._ready is not None and self._ready.done()
                             and not self._pending and code == 0):
            self._reset()
            return
        self._fail(VisionError("WORKER_CRASHED", f"The vision model {self.name} stopped "
                               f"unexpectedly (exit code {code}); it reloads on the next image."))

    def _fail(self, error: VisionError) -> None:
        self._last_error = error
        self.error = error.message
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: callers get it through wait_for / shield
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._kill()

    def _detach(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        fds = [self.process.sentinel if self.process is not None else None]
        if self.conn is not None and not self.conn.closed:
            fds.append(self.conn.fileno())
        for fd in fds:
            if fd is not None:
                try:
                    loop.remove_reader(fd)
                except (ValueError, OSError):
                    pass

    def _kill(self) -> None:
        self._detach()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        self._reset()

    def _reset(self) -> None:
        self._detach()
        if self.process is not None:
            self.process.join(timeout=1.0)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = self._ready = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if not self._pending and self.idle_s > 0 and not self._closing:
            self._idle = asyncio.get_running_loop().call_later(self.idle_s, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        if not self._pending and self.process is not None:
            asyncio.ensure_future(self.unload()).add_done_callback(lambda t: t.exception())

    async def unload(self) -> None:
        """Stop the process (its memory goes back to the system); the next image reloads."""
        process = self.process
        if process is None or self._pending:
            return
        self._detach()
        try:
            if self.conn is not None:
                self.conn.send((SHUTDOWN,))
        except OSError:
            pass
        deadline = time.monotonic() + 3.0
        while process.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._kill()

    async def shutdown(self) -> None:
        """The app is closing: fail what waits, stop the process, refuse later calls."""
        self._closing = True
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(VisionError("CANCELLED", "The app is closing."))
        self._pending.clear()
        await self.unload()
        self._kill()

    # -- requests ------------------------------------------------------------------------------
    async def caption(self, paths: list[str], prompt: str, *, max_tokens: int = 200,
                      on_delta: Callable[[str], None] | None = None) -> str:
        """The model's text about the images at `paths`; `on_delta(piece)` as it decodes.

        Cancelling the caller kills the process (decoding is not interruptible from here);
        the next call loads the model again."""
        if self._closing:
            raise VisionError("CANCELLED", "The app is closing.")
        await self._ensure_loaded()
        if self.conn is None:
            raise VisionError("WORKER_CRASHED", f"The vision model {self.name} is not running.")
        request_id = next(self._ids)
        self.requests += 1
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, on_delta)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        try:
            self.conn.send((request_id, list(paths), prompt, max_tokens))
        except OSError:
            self._pending.pop(request_id, None)
            self._on_exit()
            raise VisionError("WORKER_CRASHED", "The vision model stopped; try again.") from None
        try:
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None:
                # Decoding cannot be interrupted from here: the process goes (a person's
                # cancel, not a failure: the pane shows it unloaded, not failed).
                for other, _ in self._pending.values():
                    if not other.done():
                        other.set_exception(VisionError(
                            "CANCELLED", "The vision model was stopped to cancel another "
                            "image; send again."))
                self._pending.clear()
                self._kill()
            raise

    def status(self):
        """A WorkerStatus row for the worker pane (always shown once configured)."""
        from core.workers.pool import WorkerStatus

        pid, rss = self.pid, 0
        if pid is not None:
            try:
                import psutil

                rss = psutil.Process(pid).memory_info().rss
            except Exception:  # noqa: BLE001 - status is best effort
                rss = 0
        return WorkerStatus(
            worker_id="vision#1", model=f"{self.name} (vision)", engine="mlx-vlm",
            state=self.state, pid=pid, rss_bytes=rss, active=len(self._pending), queued=0,
            tokens_per_s=0.0, restarts=max(0, self.loads - 1), error=self.error,
        )

    def kill_now(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()


@atexit.register
def _kill_leftovers() -> None:
    for worker in list(_ALL):
        worker.kill_now()
