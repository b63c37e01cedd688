"""A child process started on first use and stopped when idle: the documents reader and
the vision model run in one each, and both want the same parent-side life.

The app side (`OnDemandProcess`) spawns the child on the first request, watches the pipe
and the process sentinel with `add_reader` (the app's loop never blocks on it), waits for
the child's READY within a start timeout, routes replies to futures by request id, stops
the child after `idle_s` without work (only a process exit gives MLX and torch memory
back), and kills it to cancel a request (work inside C code cannot be interrupted any
other way). The child side (`serve`) is the loop between messages: parent check, SHUTDOWN,
one request at a time, a failing request answered rather than fatal.

A subclass keeps its own messages: it builds its requests, reads its replies
(`_dispatch`), and writes the sentences its errors carry. Children still start through
core.workers.bootstrap (`start_child`, first thing in their entry function).

Imports only the standard library: the child imports this module before it can answer.
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
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.workers.memory_budget import Need

_CTX = mp.get_context("spawn")
_ALL: weakref.WeakSet[OnDemandProcess] = weakref.WeakSet()
PARENT_CHECK_S = 0.5
READY = "ready"
SHUTDOWN = "shutdown"
STOP_GRACE_S = 3.0  # how long a polite SHUTDOWN may take before the kill


# -- the child side ----------------------------------------------------------------------------
def serve(conn: Connection, parent_pid: int, handle: Callable[..., None],
          failed: Callable[[int, str], tuple]) -> None:
    """Say READY, then answer requests `(request_id, *args)` with `handle(request_id,
    *args)` (which sends its own replies) until SHUTDOWN, the app's exit or a closed pipe.

    A request that raises is answered with `failed(request_id, "Type: message")` and the
    child stays up for the next one."""
    from core.workers.bootstrap import parent_alive

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
            try:
                handle(*msg)
            except Exception as exc:  # noqa: BLE001 - reported to the caller, not fatal here
                conn.send(failed(msg[0], f"{type(exc).__name__}: {exc}"))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the app went away


# -- the app side ------------------------------------------------------------------------------
class MemoryGate(Protocol):
    """The pool's admission as a child that holds a model sees it (core.workers.pool):
    a child's model counts against the same memory budget as the chat models."""

    async def admit_outside(self, holder: OnDemandProcess, need: Need) -> int: ...

    def release_outside(self, holder: OnDemandProcess) -> None: ...


class OnDemandProcess:
    """Starts the child on first use, routes requests, unloads it when idle.

    Subclasses name the child (`process_name`, `_child`), read its replies (`_dispatch`,
    using `_started`, `_resolve`, `_reject` and `_listener`) and write their errors
    (the `_*_error` methods)."""

    process_name = "llmdeck-child"
    join_timeout_s = 0.5  # how long a stopped child may take to be reaped

    def __init__(self, *, idle_s: float, start_timeout_s: float) -> None:
        self.idle_s = idle_s
        self.start_timeout_s = start_timeout_s
        self.process: Any = None
        self.conn: Connection | None = None
        self.starts = 0  # processes started so far (status, tests, the bench)
        self.requests = 0  # requests sent to a child
        self.last_used = time.monotonic()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._listeners: dict[int, Callable[..., None]] = {}  # progress / delta callbacks
        self._ids = itertools.count(1)
        self._ready: asyncio.Future[int] | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._closing = False
        self._stopping: asyncio.Future[None] | None = None  # set while a polite stop runs
        # The memory budget's admission (None: not counted). With a gate, a start first
        # asks it for the model's bytes (idle chat models may be unloaded for them, or the
        # start is refused with the numbers); the bytes go back when the process ends.
        self.gate: MemoryGate | None = None
        self.memory_bytes = 0  # what admission granted the running child
        _ALL.add(self)

    # -- what a subclass says ------------------------------------------------------------------
    def _child(self) -> tuple[Callable[..., None], tuple]:
        """The child's entry function and its arguments after (conn, parent_pid)."""
        raise NotImplementedError

    def _dispatch(self, msg: tuple) -> None:
        raise NotImplementedError

    def _start_timeout_error(self) -> Exception:
        raise NotImplementedError

    def _crashed_error(self, exitcode: int | None) -> Exception:
        raise NotImplementedError

    def _closing_error(self) -> Exception:
        raise NotImplementedError

    def _not_running_error(self) -> Exception:
        raise NotImplementedError

    def _send_failed_error(self) -> Exception:
        raise NotImplementedError

    def _cancelled_for_other_error(self) -> Exception:
        raise NotImplementedError

    def _exit_is_quiet(self, exitcode: int | None) -> bool:
        """True when the child's exit fails nothing (a subclass may allow clean exits)."""
        return False

    def _memory_need(self) -> Need:
        """What the child's model takes once loaded (run off the loop: reads files)."""
        from core.workers.memory_budget import UNKNOWN

        return UNKNOWN

    def _refused_error(self, message: str) -> Exception:
        """The error a start refused by the memory budget fails with (`message` names the
        numbers)."""
        raise NotImplementedError

    # -- as a holder of the memory budget (core.workers.admission) ------------------------------
    @property
    def label(self) -> str:
        return self.process_name

    def held_bytes(self) -> int:
        return self.memory_bytes

    def budget_fields(self) -> dict[str, Any]:
        """Its memory, last use and idle time left, as the pool's rows carry them (F4's
        memory line, `llmdeck workers`); empty while the budget does not count it."""
        if not self.memory_bytes:
            return {}
        ago = time.monotonic() - self.last_used
        left = max(0.0, self.idle_s - ago) if self.idle_s > 0 and not self._pending else None
        return {"memory_bytes": self.memory_bytes, "last_used": time.time() - ago,
                "idle_left_s": left}

    def idle(self) -> bool:
        """Running, started and with no request in flight: admission may unload it."""
        return (self.process is not None and self._ready is not None and self._ready.done()
                and not self._pending and self._stopping is None)

    # -- state ------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        alive = self.process is not None and self.process.is_alive()
        return self.process.pid if alive else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    # -- lifecycle -----------------------------------------------------------------------------
    async def _ensure_started(self) -> None:
        while self._stopping is not None:  # a request during an idle stop starts afresh
            await asyncio.shield(self._stopping)
        if self._ready is not None:
            await asyncio.shield(self._ready)
            return
        loop = asyncio.get_running_loop()
        self._ready = ready = loop.create_future()
        if self.gate is not None:
            await self._admit(self.gate)
        target, args = self._child()
        parent, child = _CTX.Pipe(duplex=True)
        self.process = _CTX.Process(target=target, args=(child, os.getpid(), *args),
                                    name=self.process_name, daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        self.starts += 1
        loop.add_reader(parent.fileno(), self._on_readable)
        loop.add_reader(self.process.sentinel, self._on_exit)
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
        except TimeoutError:
            error = self._start_timeout_error()
            self._fail(error)  # callers waiting on the same start get the error too
            raise error from None

    async def _admit(self, gate: MemoryGate) -> None:
        """Room in the memory budget before the child starts, or the start fails (every
        caller waiting on it included) with the budget's sentence."""
        from core.workers.memory_budget import UNKNOWN

        try:
            need = await asyncio.to_thread(self._memory_need)
        except Exception:  # noqa: BLE001 - unreadable here: counted as nothing; the child says why
            need = UNKNOWN
        try:
            await gate.admit_outside(self, need)
        except asyncio.CancelledError:  # the caller went away: the next call starts afresh
            self._fail(self._cancelled_for_other_error())
            raise
        except Exception as exc:  # noqa: BLE001 - the pool's refusal (WorkerLoadError)
            error = self._refused_error(getattr(exc, "message", str(exc)))
            self._fail(error)
            raise error from None
        self.memory_bytes = need.total_bytes

    def _on_readable(self) -> None:
        try:
            while self.conn is not None and self.conn.poll():
                self._dispatch(self.conn.recv())
        except (EOFError, OSError):
            self._on_exit()

    def _on_exit(self) -> None:
        """The process ended: fail what was waiting on it; the next call starts a new one."""
        if self.process is None:
            return
        code = self.process.exitcode
        if code is None:  # the pipe closed first: the exit is moments away, wait for its code
            self.process.join(timeout=self.join_timeout_s)
            code = self.process.exitcode
        if self._exit_is_quiet(code):
            self._reset()
            return
        self._fail(self._crashed_error(code))

    def _fail(self, error: Exception) -> None:
        """Fail the start and every request in flight with `error`, and stop the child."""
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved here: callers get it through wait_for / shield
        self._fail_pending(error)
        self._stop_now()

    def _fail_pending(self, error: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

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
        self._detach()
        if self.process is not None:
            self.process.join(timeout=self.join_timeout_s)
        if self.conn is not None:
            self.conn.close()
        self.process = None
        self.conn = None
        self._ready = None
        self._cancel_idle()
        if self.gate is not None:  # its memory goes back to the budget
            self.memory_bytes = 0
            self.gate.release_outside(self)

    def _stop_now(self) -> None:
        self._detach()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        self._reset()

    def _cancel_idle(self) -> None:
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None

    def _arm_idle(self) -> None:
        self.last_used = time.monotonic()
        self._cancel_idle()
        if not self._pending and self.idle_s > 0 and not self._closing:
            self._idle_handle = asyncio.get_running_loop().call_later(self.idle_s, self._on_idle)

    def _on_idle(self) -> None:
        self._idle_handle = None
        if not self._pending and self.process is not None:
            task = asyncio.ensure_future(self.unload())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def unload(self) -> None:
        """Stop the idle process (its memory goes back to the system); the next request
        starts it again. Does nothing while work is in flight."""
        if self.process is None or self._pending:
            return
        await self._stop_politely()

    async def _stop_politely(self) -> None:
        """Ask the child to stop, wait up to STOP_GRACE_S, then kill it. A request that
        arrives meanwhile waits for the end of the stop, then starts a new child."""
        if self._stopping is not None:  # one stop at a time: join the one under way
            await asyncio.shield(self._stopping)
            return
        process = self.process
        stopping = self._stopping = asyncio.get_running_loop().create_future()
        self._detach()
        try:
            if self.conn is not None:
                self.conn.send((SHUTDOWN,))
        except OSError:
            pass
        try:
            deadline = time.monotonic() + STOP_GRACE_S
            while process.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            self._stop_now()
            self._stopping = None
            stopping.set_result(None)

    def kill_now(self) -> None:
        """Synchronous last resort (atexit)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    # -- requests ------------------------------------------------------------------------------
    async def _request(self, *args: Any, listener: Callable[..., None] | None = None) -> Any:
        """Send `(request_id, *args)` to the child (starting it first) and wait for the
        reply `_dispatch` resolves. `listener` receives what `_dispatch` streams meanwhile.

        Cancelling the caller kills the child: other requests in flight fail with
        `_cancelled_for_other_error`, and the next request starts afresh."""
        if self._closing:
            raise self._closing_error()
        await self._ensure_started()
        if self.conn is None:
            raise self._not_running_error()
        request_id = next(self._ids)
        self.requests += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._cancel_idle()
        if listener is not None:
            self._listeners[request_id] = listener
        try:
            self.conn.send((request_id, *args))
        except OSError:
            self._pending.pop(request_id, None)
            self._listeners.pop(request_id, None)
            self._on_exit()
            raise self._send_failed_error() from None
        try:
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None:
                self._fail_pending(self._cancelled_for_other_error())
                self._stop_now()
            raise
        finally:
            self._listeners.pop(request_id, None)

    # -- for `_dispatch` -----------------------------------------------------------------------
    def _started(self, pid: int) -> None:
        """The child said READY."""
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(pid)

    def _listener(self, request_id: int) -> Callable[..., None] | None:
        return self._listeners.get(request_id)

    def _resolve(self, request_id: int, value: Any) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(value)
        self._arm_idle()

    def _reject(self, request_id: int, error: Exception) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)
        self._arm_idle()

    def rss_bytes(self) -> int:
        """The child's resident memory for the status pane (0 when unknown)."""
        pid = self.pid
        if pid is None:
            return 0
        try:
            import psutil

            return psutil.Process(pid).memory_info().rss
        except Exception:  # noqa: BLE001 - status is best effort
            return 0


@atexit.register
def _kill_leftovers() -> None:
    for worker in list(_ALL):
        worker.kill_now()
