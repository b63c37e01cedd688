"""One model worker process, seen from the app: its pipe, its requests, its death.

Lives on the pool's asyncio loop. The pipe and the process sentinel are read with
`loop.add_reader`, so the loop never blocks on a worker. A worker that dies fails its
open requests with Error(WORKER_CRASHED) at once and asks its owner (the pool) to start it
again; one stopped on purpose ends its requests with the reason it was given.

It knows its model and its owner only through the two small protocols below, so the pool
and the model group can import it without a circle.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from typing import Any, Protocol

from core.engines.base import GenerationRequest, ModelSpec
from core.events import Done, Error, ReasoningDelta, TextDelta
from core.workers import protocol as p
from core.workers.load_error import WorkerLoadError
from core.workers.request_stream import RequestStream
from core.workers.slots import PrioritySlots
from core.workers.status import WorkerStatus
from core.workers.worker_main import worker_main

_CTX = mp.get_context("spawn")
CLOSING = "llmdeck is closing; the reply so far was kept."


class WorkerOwner(Protocol):
    """What a worker needs of the pool that started it."""

    load_timeout_s: float
    closing: bool
    idle_unload_s: float | None

    def respawn_later(self, worker: WorkerProcess, *, counted: bool = True) -> None: ...


class ModelOfWorker(Protocol):
    """What a worker needs of the model it serves (core.workers.model_group)."""

    key: str
    label: str
    spec: ModelSpec
    replicas: int
    workers: list[Any]

    def killed_while_loading(self) -> str: ...

    def blame(self, inflight: list[GenerationRequest]) -> GenerationRequest | None: ...

    def forget_worker(self, worker: WorkerProcess) -> None: ...

    def held_bytes(self) -> int: ...

    def last_used_wall(self) -> float: ...

    def idle_left(self, default_keep_s: float | None) -> float | None: ...


class WorkerProcess:
    """One worker process and the requests in flight on it."""

    def __init__(self, pool: WorkerOwner, group: ModelOfWorker, index: int, replica: int = 0) -> None:
        self.pool = pool
        self.group = group
        self.worker_id = f"{group.key}#{index}"
        self.replica = replica  # its place among the model's replicas (0 .. replicas - 1)
        self.process: Any = None
        self.conn: Any = None
        self.urgent: Any = None  # the shared flag interrupt() raises
        self.state = "loading"
        self.info: dict[str, Any] = {}
        self.streams: dict[str, RequestStream] = {}  # running on the worker
        self.queue: dict[str, RequestStream] = {}  # waiting for a free slot on it
        self.slots = PrioritySlots(1)  # the person's turns first (core.workers.slots)
        self.waiting = 0
        self.stop_reason: str | None = None  # why the pool stopped it (unload, shutdown)
        self.restarts = 0
        self.restart_times: deque[float] = deque()
        self.error: str | None = None
        self.token_times: deque[tuple[float, int]] = deque()
        self.last_used = time.monotonic()
        self.fatal = False  # the worker reported an internal error before exiting
        self._loaded: asyncio.Future[dict[str, Any]] | None = None
        self.settled: asyncio.Future[None] | None = None  # done when start() has finished

    # -- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        self.settled = asyncio.get_running_loop().create_future()
        try:
            await self._start()
        finally:
            if not self.settled.done():
                self.settled.set_result(None)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        parent_conn, child_conn = _CTX.Pipe(duplex=True)
        self.urgent = _CTX.RawValue(ctypes.c_bool, False)  # see interrupt()
        self.process = _CTX.Process(
            target=worker_main,
            args=(child_conn, self.worker_spec(), os.getpid(), self.urgent),
            name=f"llmdeck-worker-{self.worker_id}",
            daemon=True,
        )
        self.state = "loading"
        self.error = None
        self.fatal = False
        self.stop_reason = None
        self._loaded = loop.create_future()
        self.process.start()
        child_conn.close()
        self.conn = parent_conn
        loop.add_reader(self.conn.fileno(), self._on_readable)
        loop.add_reader(self.process.sentinel, self._on_exit)
        try:
            self.info = await asyncio.wait_for(
                asyncio.shield(self._loaded), timeout=self.pool.load_timeout_s
            )
        except TimeoutError:
            self.detach()
            self.kill()
            self.state = "failed"
            self.error = (
                f"The model did not finish loading within {self.pool.load_timeout_s:.0f} s "
                "and was stopped. Check that the file is a valid model and that memory is free."
            )
            raise WorkerLoadError("TIMEOUT", self.error) from None
        except WorkerLoadError as exc:
            # The worker said why and exits (or the pool stopped it): stop watching its pipe
            # and handle, whose EOF would wake the loop on every turn, and do not take the
            # exit for a crash to respawn (the same load fails the same way).
            self.detach()
            if self.state == "loading":
                self.state, self.error = "failed", exc.message
            raise
        # An engine that sets a running reply aside for a person's turn takes one more,
        # only for interactive requests (core.workers.slots).
        self.slots = PrioritySlots(int(self.info.get("max_concurrency", 1)),
                                   spare=1 if self.info.get("preempts") else 0)
        self.state = "ready"

    def worker_spec(self) -> ModelSpec:
        """The model's spec plus where this worker stands among its replicas: a llama.cpp
        worker takes its share of the cores (core.engines.llama_params). The model's own
        options come after, so an explicit setting (threads, replicas) still wins."""
        spec = self.group.spec
        ours = (("replicas", self.group.replicas), ("replica", self.replica))
        return dataclasses.replace(spec, options=ours + tuple(spec.options))

    def detach(self) -> None:
        loop = asyncio.get_running_loop()
        for fd in (self._fileno(), self._sentinel()):
            if fd is not None:
                loop.remove_reader(fd)

    def _fileno(self) -> int | None:
        try:
            return self.conn.fileno() if self.conn and not self.conn.closed else None
        except OSError:
            return None

    def _sentinel(self) -> int | None:
        return self.process.sentinel if self.process is not None else None

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=2)

    def stop_streams(self, reason: str) -> None:
        """The pool stops this worker on purpose: every request on it or queued for it
        ends now with `reason` (its text so far kept), and a load under way fails."""
        self.stop_reason = reason
        for stream in [*self.streams.values(), *self.queue.values()]:
            stream.end(Error("CANCELLED", reason), Done("error"))
        self.streams.clear()
        self.queue.clear()
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(WorkerLoadError("LOAD_FAILED", reason))
            self._loaded.exception()  # retrieved here: start() gets it through wait_for

    # -- pipe ------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            while self.conn.poll():
                self._dispatch(self.conn.recv())
        except (EOFError, OSError):
            self._on_exit()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == p.STEP:
            now = time.monotonic()
            tokens = 0
            for request_id, events in msg[1]:
                stream = self.streams.get(request_id)
                if stream is None:
                    continue
                if type(events) is str:  # the compact form of a lone TextDelta
                    stream.put(TextDelta(events))
                    tokens += 1
                    continue
                for event in events:
                    stream.put(event)
                    if isinstance(event, TextDelta | ReasoningDelta):
                        tokens += 1
                    elif isinstance(event, Done):
                        stream.done = True
                        self.streams.pop(request_id, None)
            if tokens:
                self.token_times.append((now, tokens))
        elif kind == p.LOADED:
            if self._loaded and not self._loaded.done():
                self._loaded.set_result(msg[1])
        elif kind == p.LOAD_FAILED:
            if self._loaded and not self._loaded.done():
                self._loaded.set_exception(WorkerLoadError(msg[1], msg[2]))
        elif kind == p.FATAL:
            self.error = "The worker hit an internal error and stopped."
            self.fatal = True

    def _on_exit(self) -> None:
        """The process ended: fail its requests now, then respawn within the budget."""
        self.detach()  # an ended process stays readable: watched, it would wake the loop
        if self.state in ("crashed", "stopped", "failed"):  # on every turn
            return
        if self._loaded and not self._loaded.done():
            if self.process is not None:
                self.process.join(timeout=1.0)
            code = self.process.exitcode if self.process else None
            if code == -signal.SIGKILL:  # the system's OOM killer, almost always: say so
                error = WorkerLoadError("OOM", self.group.killed_while_loading())
            else:
                error = WorkerLoadError("LOAD_FAILED", f"The worker exited while loading (exit code {code}).")
            self._loaded.set_exception(error)
            self.state = "failed"
            return
        if self.pool.closing:
            self.state = "stopped"
            self.stop_streams(CLOSING)
            return
        self.process.join(timeout=0.1)
        code = self.process.exitcode
        self.state = "crashed"
        cause = self._cause(code)
        culprit = self.group.blame([st.request for st in self.streams.values() if st.request])
        for stream in self.streams.values():
            if culprit is None:
                message = f"The model worker {cause}."
            elif stream.request is culprit:
                message = f"The model worker {cause} while generating this request."
            else:
                message = f"The model worker {cause} while generating another request."
            stream.put(Error("WORKER_CRASHED", message + " The reply so far was kept; send again "
                             "to retry."))
            stream.put(Done("error"))
            stream.done = True
        self.streams.clear()
        self.group.forget_worker(self)
        self.pool.respawn_later(self, counted=culprit is None)

    def _cause(self, code: int | None) -> str:
        """What happened to the process, in words (exit code 0 means it reported an error)."""
        if self.fatal or code == 0:
            return "hit an internal error and stopped"
        if code is not None and code < 0 and -code == 9:
            return "was killed (out of memory, or stopped by the system)"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"crashed ({name})"
        return f"stopped unexpectedly (exit code {code})"

    def send(self, msg: tuple) -> None:
        self.conn.send(msg)

    def interrupt(self) -> None:
        """Cut the worker's step in flight short (sent after the message it is for): a
        person's turn needs this worker or its cores now. An engine that can (llama.cpp:
        core.engines.llama_abort) stops an API reply's step and does it again later."""
        if self.urgent is not None:
            self.urgent.value = True

    # -- status ----------------------------------------------------------------
    def tokens_per_s(self, window: float = 10.0) -> float:
        cutoff = time.monotonic() - window
        while self.token_times and self.token_times[0][0] < cutoff:
            self.token_times.popleft()
        return sum(n for _, n in self.token_times) / window

    def load(self) -> int:
        return len(self.streams) + self.waiting

    def status(self) -> WorkerStatus:
        rss = 0
        pid = self.process.pid if self.process is not None else None
        if pid and self.state not in ("crashed", "failed", "stopped"):
            try:
                import psutil

                rss = psutil.Process(pid).memory_info().rss
            except Exception:
                rss = 0
        state = self.state
        if state == "ready":
            state = "busy" if self.streams else "idle"
        return WorkerStatus(
            worker_id=self.worker_id,
            model=self.group.label,
            engine=self.group.spec.engine,
            state=state,
            pid=pid,
            rss_bytes=rss,
            active=len(self.streams),
            queued=self.waiting,
            tokens_per_s=self.tokens_per_s(),
            restarts=self.restarts,
            error=self.error,
            memory_bytes=self.group.held_bytes() // max(1, len(self.group.workers)),
            last_used=self.group.last_used_wall(),
            idle_left_s=self.group.idle_left(self.pool.idle_unload_s),
            path=self.group.spec.path,
            threads=_whole(self.info.get("threads")),
        )


def _whole(value: Any) -> int:
    """A count a worker reported (its engine's info), or 0 when it reported none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
