"""Sandbox: the app-side handle on the sandbox worker process.

Runs are serialised (one sandbox process, one run at a time) and waited for off the
event loop, so the chat keeps streaming while code runs. A run past its timeout, a
MemoryError, a crash, a thread left running or a cancelled turn replaces the process: it
is killed with everything it started, a fresh one is started in the background, and the
result says the namespace was reset. What walls the code runs behind: jail.py.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing as mp
import os
import re
import signal
import sys
import uuid
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from core import paths
from core.tools.sandbox import jail
from core.tools.sandbox.launcher import sandbox_main
from core.tools.sandbox.worker import EXIT_CPU_LIMIT

_CTX = mp.get_context("spawn")
_ALL: weakref.WeakSet[Sandbox] = weakref.WeakSet()
START_TIMEOUT_S = 60.0
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MEMORY_MB = 1024
DEFAULT_CPU_S = 3600  # per process: a backstop for what the wall-clock timeout cannot see
OPEN_FILES = 256
PROCESSES = 64
FILE_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced. `kind` says why it failed: exception | timeout | memory |
    crashed | cancelled; `reset` is True when the run cost the conversation its variables."""

    ok: bool
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None
    kind: str | None = None
    figures: tuple[str, ...] = ()
    reset: bool = False
    pid: int | None = field(default=None, compare=False)
    note: str | None = None  # what the sandbox stopped after the run (processes, threads)

    def text(self) -> str:
        """The result as the model (and the tool card) reads it, like a notebook cell's output."""
        parts: list[str] = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.value is not None:
            parts.append(self.value)
        for path in self.figures:
            parts.append(f"[figure saved: {path}]")
        if self.error:
            parts.append(self.error)
        if self.note:
            parts.append(self.note)
        if self.reset:
            parts.append("(The Python session was restarted; variables from earlier runs are gone.)")
        return "\n".join(parts) if parts else "(no output)"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "default"


class Sandbox:
    """One sandbox worker process with a persistent namespace per conversation."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB, cpu_s: int = DEFAULT_CPU_S) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.cpu_s = cpu_s
        self.walls: dict[str, bool] = {}  # which walls the running worker is behind
        self._cgroup: str | None = None  # as root: the pids cgroup (RLIMIT_NPROC exempts root)
        self._walls_told = False  # the first result says so when the Linux walls are down
        self._walls_failed: str | None = None  # why they could not be built (then: without)
        self.restarts = 0
        self._proc: Any = None
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self._respawn_task: asyncio.Task[None] | None = None
        self._closed = False
        _ALL.add(self)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def figure_dir(self, conversation_id: str) -> str:
        return str(paths.data_dir() / "figures" / _safe(conversation_id))

    def _config(self) -> dict[str, Any]:
        workdir = str(paths.data_dir() / "sandbox")
        if self._cgroup is None or not os.path.isdir(self._cgroup):
            self._cgroup = jail.pids_cgroup(f"{jail.CGROUP_PREFIX}{os.getpid()}-{id(self):x}",
                                            PROCESSES)
        return {
            "cgroup": self._cgroup,
            "parent_pid": os.getpid(), "workdir": workdir,
            "writable": [workdir, str(paths.data_dir() / "figures")],
            "memory_bytes": self.memory_mb * 1024 * 1024, "cpu_s": self.cpu_s,
            "open_files": OPEN_FILES, "processes": PROCESSES, "file_bytes": FILE_BYTES,
            "jail": (os.environ.get("LLMDECK_SANDBOX_JAIL", "1") != "0"
                     and self._walls_failed is None),
        }

    async def start(self) -> None:
        """Start the worker now (it also starts on the first run)."""
        async with self._lock:
            await self._ensure()

    async def _ensure(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        try:
            await self._start()
        except _WallsFailed as exc:  # a system that half-allows namespaces (AppArmor's
            self._walls_failed = str(exc)  # userns restriction): run without, and say so
            await self._start()

    async def _start(self) -> None:
        self._kill()
        parent, child = _CTX.Pipe()
        proc = _CTX.Process(
            target=sandbox_main, name="llmdeck-sandbox", args=(child, self._config()),
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        try:
            reply = await asyncio.to_thread(_wait_reply, parent, proc.sentinel, START_TIMEOUT_S)
        except asyncio.CancelledError:  # half-started: its "ready" must never pass for a result
            self._kill()
            raise
        if reply is not None and reply is not _TIMED_OUT and reply[0] == "failed":
            self._kill()
            raise _WallsFailed(reply[1])
        if reply is None or reply is _TIMED_OUT or reply[0] != "ready":
            self._kill()
            raise RuntimeError("The Python sandbox did not start; see the log folder for details.")
        self.walls = dict(reply[2])

    async def run(self, conversation_id: str, code: str, *,
                  timeout_s: float | None = None) -> RunResult:
        """Run `code` in the conversation's namespace; never raises for what the code does."""
        if self._closed:
            return RunResult(False, error="The Python sandbox is shut down.", kind="crashed")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            try:
                await self._ensure()
            except (RuntimeError, OSError) as exc:  # could not start: a result, not a crash
                self._kill()
                return RunResult(False, kind="crashed", error=str(exc))
            proc, conn = self._proc, self._conn
            assert conn is not None
            pid = proc.pid
            run_id = uuid.uuid4().hex[:10]
            try:
                conn.send(("run", run_id, conversation_id, code, self.figure_dir(conversation_id)))
                reply = await asyncio.to_thread(_wait_reply, conn, proc.sentinel, timeout)
            except asyncio.CancelledError:
                self._replace()
                raise
            except OSError:
                reply = None
            if reply is _TIMED_OUT:
                self._replace()
                return RunResult(False, kind="timeout", reset=True, pid=pid, error=(
                    f"Stopped: the code ran longer than the {timeout:g} s limit."))
            if reply is None or reply[0] != "result" or reply[1] != run_id:
                proc.join(timeout=1)
                cpu = proc.exitcode in (-signal.SIGXCPU, EXIT_CPU_LIMIT)
                self._replace()
                if cpu:
                    return RunResult(False, kind="timeout", reset=True, pid=pid, error=(
                        f"Stopped: a process of this code used more than {self.cpu_s} s of "
                        "CPU time (the sandbox's CPU limit)."))
                return RunResult(False, kind="crashed", reset=True, pid=pid, error=(
                    "The Python sandbox died while running this code (out of memory or a crash)."))
            data: dict[str, Any] = reply[2]
            restart = bool(data.get("restart"))
            if data.get("kind") == "memory":
                data["error"] = (f"MemoryError: the code went over the sandbox memory limit "
                                 f"of {self.memory_mb} MiB.")
            if restart:
                self._replace()
            return RunResult(
                ok=bool(data["ok"]), stdout=data.get("stdout", ""), stderr=data.get("stderr", ""),
                value=data.get("value"), error=data.get("error"), kind=data.get("kind"),
                figures=tuple(data.get("figures") or ()), reset=restart, pid=pid,
                note=self._with_walls_note(data.get("note")),
            )

    def _with_walls_note(self, note: str | None) -> str | None:
        """Once: on Linux without the namespaces, say what is open to the code."""
        if self._walls_told or not sys.platform.startswith("linux") or self.walls.get(
                "pid_namespace", True):
            return note
        self._walls_told = True
        why = (f"{self._walls_failed}" if self._walls_failed
               else "the system refused them, or LLMDECK_SANDBOX_JAIL=0")
        down = (f"(Sandbox: it runs without its namespaces here ({why}), so the network, "
                "your files and other processes are open to this code; see the README.)")
        return f"{note}\n{down}" if note else down

    def _replace(self) -> None:
        """Kill the worker (its namespaces go with it) and start a new one in the background."""
        self._kill()
        self.restarts += 1
        if not self._closed:
            self._respawn_task = asyncio.ensure_future(self._respawn())

    async def _respawn(self) -> None:
        try:
            async with self._lock:
                await self._ensure()
        except RuntimeError:
            pass  # the next run tries again and reports it

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None:  # kill first: a thread waiting on the pipe wakes on the sentinel
            if proc.is_alive():
                _kill_tree(proc.pid)
            proc.join(timeout=5)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        """Stop the worker; safe to call more than once."""
        self._closed = True
        if self._respawn_task is not None and not self._respawn_task.done():
            self._respawn_task.cancel()
        async with self._lock:
            self._kill()
        await self._remove_cgroup()

    async def _remove_cgroup(self) -> None:
        """The killed processes leave their cgroup within moments; then it goes."""
        if self._cgroup is None:
            return
        for _ in range(40):
            if jail.remove_cgroup(self._cgroup):
                self._cgroup = None
                return
            await asyncio.sleep(0.025)


_TIMED_OUT = ("timeout",)


class _WallsFailed(RuntimeError):
    """The launcher entered the namespaces but could not build the walls inside them."""


def _kill_tree(pid: int) -> None:
    """SIGKILL the launcher, its process group and every descendant.

    Behind the Linux walls the kernel would end them anyway (the worker is PID 1 of its
    own PID namespace and dies with the launcher); without them this is what reaches a
    child that left the group (setsid), as long as it is still a descendant."""
    try:
        import psutil

        descendants = psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - gone already, or psutil cannot see it
        descendants = []
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass
    for child in descendants:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - exited meanwhile
            pass


def _wait_reply(conn: Connection, sentinel: int, timeout: float) -> tuple | None:
    """Block (in a thread) until the worker answers (its message), dies (None) or the
    timeout passes (_TIMED_OUT)."""
    ready = wait([conn, sentinel], timeout)
    if not ready:
        return _TIMED_OUT
    if conn in ready:
        try:
            return conn.recv()
        except (EOFError, OSError):
            return None
    return None


@atexit.register
def _kill_all() -> None:
    for sandbox in list(_ALL):
        sandbox._closed = True
        sandbox._kill()
        if sandbox._cgroup is not None:  # still populated for a moment: the next app's
            jail.remove_cgroup(sandbox._cgroup)  # sandbox sweeps what is left
