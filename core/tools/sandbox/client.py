"""Sandbox: the app-side handle on the Python sandboxes, one per conversation.

Each conversation gets its own sandbox process tree (launcher -> supervisor -> runner, see
launcher.py and supervisor.py), started on its first run: nothing crosses between
conversations (variables, scratch files, processes). At most `max_live` stay alive; the
least recently used idle one is closed to make room and its conversation's next result
says its variables are gone, as a reset does.

The app reads a sandbox only through channel.py: length-prefixed JSON frames, each read
on the event loop within the run's deadline, at most MAX_FRAME bytes, checked against its
schema. A frame that is cut short, garbage, too large, of the wrong shape or late ends
the run with a sentence and a fresh sandbox; nothing the sandbox sends is ever executed.
While a run goes on, a watcher sums the memory of all the sandbox's processes every
100 ms and ends the run past the total limit. Runs in one conversation are serialised;
a run past its timeout, over the memory total, a crash or a cancelled turn replaces that
conversation's sandbox (killed with everything it started, a fresh one started in the
background). What walls the code runs behind: jail.py (and cgroups.py, macos_profile.py).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import sys
import time
import uuid
import weakref
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

from core import json_text, paths
from core.tools.sandbox import cgroups, channel
from core.tools.sandbox.launcher import SANDBOX_EXEC, sandbox_main
from core.wire.tools import RunResult

_CTX = mp.get_context("spawn")
_ALL: weakref.WeakSet[Sandbox] = weakref.WeakSet()
START_TIMEOUT_S = 60.0
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MEMORY_MB = 1024  # all the sandbox's processes together (and each one's address space)
DEFAULT_SCRATCH_MB = 256  # its /tmp (a tmpfs in the jail; outside it, a file-size limit)
DEFAULT_CPU_S = 3600  # per process: a backstop for what the wall-clock timeout cannot see
MAX_LIVE = 4  # conversations whose sandbox (and variables) stay alive at once
OPEN_FILES = 256
PROCESSES = 64
MEMORY_CHECK_S = 0.1




def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "default"


def jail_wanted() -> bool:
    """False when the person turned the Linux walls off (LLMDECK_SANDBOX_JAIL=0)."""
    return os.environ.get("LLMDECK_SANDBOX_JAIL", "1") != "0"


class Sandbox:
    """The conversations' sandboxes: `run(conversation_id, code)` runs in that
    conversation's own one, starting it on first use."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB, cpu_s: int = DEFAULT_CPU_S,
                 scratch_mb: int = DEFAULT_SCRATCH_MB, max_live: int = MAX_LIVE,
                 supervisor: list[str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.cpu_s = cpu_s
        self.scratch_mb = scratch_mb
        self.max_live = max(1, max_live)
        self.processes = PROCESSES  # per sandbox (RLIMIT_NPROC, or a pids cgroup as root)
        # The supervisor script and its arguments; tests stand a hostile one in to attack
        # the app's reader from the sandbox's side of the channel.
        self.supervisor = list(supervisor) if supervisor else None
        self.restarts = 0
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # least recent first
        self._spare: _Session | None = None  # started by start() before any conversation
        self._last: _Session | None = None
        self._evicted: set[str] = set()  # conversations whose sandbox was closed for room
        self._walls_failed: str | None = None  # why the walls could not go up (then: without)
        self._walled_once = False  # a sandbox started behind its namespaces here
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        _ALL.add(self)

    # -- what the rest of the app reads ---------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The launcher pid of the sandbox used (or started) last."""
        return self._last.pid if self._last is not None else None

    @property
    def walls(self) -> dict[str, bool]:
        """Which walls the sandbox used last runs behind."""
        return dict(self._last.walls) if self._last is not None else {}

    def live(self) -> int:
        return sum(1 for s in self._sessions.values() if s.pid is not None)

    def figure_dir(self, conversation_id: str) -> str:
        return str(paths.data_dir() / "figures" / _safe(conversation_id))

    def unwalled(self) -> str | None:
        """Why the code would run with the person's own full rights (the walls are turned
        off, could not be built here, or this platform has none), or None when walled."""
        refused = (_namespaces_refused() if sys.platform.startswith("linux")
                   and not self._walled_once else None)
        if not jail_wanted():
            why = "its walls are turned off (LLMDECK_SANDBOX_JAIL=0)"
        elif self._walls_failed is not None:
            why = f"its walls could not be built here: {self._walls_failed.rstrip('.')}"
        elif refused is not None:
            why = refused
        elif sys.platform.startswith("linux") or (
                sys.platform == "darwin" and os.path.exists(SANDBOX_EXEC)):
            return None
        else:
            why = "this system has no walls for it"
        return (f"This code will run with your full rights as your user, not in a sandbox: "
                f"{why}. It can read and change your files, reach the network and see "
                "your other programs.")

    # -- runs ---------------------------------------------------------------------------------
    async def start(self, conversation_id: str | None = None) -> None:
        """Start a sandbox now: the conversation's, or a spare the next new one takes."""
        if self._closed:
            return
        if conversation_id is None:
            if self._spare is None:
                self._spare = _Session(self, f"spare-{uuid.uuid4().hex[:8]}")
            session = self._spare
        else:
            session = self._session(conversation_id)
        self._last = session
        async with session.lock:
            await session.ensure()

    async def run(self, conversation_id: str, code: str, *,
                  timeout_s: float | None = None) -> RunResult:
        """Run `code` in the conversation's sandbox; never raises for what the code (or the
        sandbox) does."""
        if self._closed:
            return RunResult(False, error="The Python sandbox is shut down.", kind="crashed")
        if len(code) > channel.CODE_LIMIT:
            return RunResult(False, kind="exception", error=(
                f"The code is {len(code):,} characters long; the sandbox takes at most "
                f"{channel.CODE_LIMIT:,} in one run."))
        session = self._session(conversation_id)
        self._last = session
        timeout = self.timeout_s if timeout_s is None else timeout_s
        result = await session.run(code, timeout, self.figure_dir(conversation_id))
        if conversation_id in self._evicted:
            self._evicted.discard(conversation_id)
            result = replace(result, reset=True)
        return result

    def _session(self, conversation_id: str) -> _Session:
        session = self._sessions.get(conversation_id)
        if session is not None:
            self._sessions.move_to_end(conversation_id)
            return session
        if self._spare is not None:
            session, self._spare = self._spare, None
        else:
            session = _Session(self, _safe(conversation_id))
        self._sessions[conversation_id] = session
        self._make_room()
        return session

    def _make_room(self) -> None:
        """Close the least recently used idle sandboxes past `max_live`."""
        excess = len(self._sessions) - self.max_live
        for cid in list(self._sessions):
            if excess <= 0:
                return
            session = self._sessions[cid]
            if session.lock.locked():
                continue  # running (or starting): it stays until it is idle
            del self._sessions[cid]
            if session.pid is not None or session.ran:
                self._evicted.add(cid)
            self._close_later(session)
            excess -= 1

    def _close_later(self, session: _Session) -> None:
        task = asyncio.ensure_future(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def end(self, conversation_id: str) -> None:
        """Close a conversation's sandbox (the conversation was deleted)."""
        session = self._sessions.pop(conversation_id, None)
        self._evicted.discard(conversation_id)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        """Stop every sandbox; safe to call more than once."""
        self._closed = True
        sessions = list(self._sessions.values()) + ([self._spare] if self._spare else [])
        self._sessions.clear()
        self._spare = None
        await asyncio.gather(*(s.close() for s in sessions), *self._closing,
                             return_exceptions=True)

    def _config(self, session: _Session) -> dict[str, Any]:
        name = f"{cgroups.CGROUP_PREFIX}{os.getpid()}-{id(session):x}"
        if session.cgroup is None or not os.path.isdir(session.cgroup):
            session.cgroup = cgroups.pids_cgroup(name, PROCESSES)
        if session.memory_cgroup is None or not os.path.isdir(session.memory_cgroup):
            try:  # tmpfs pages count in a memory cgroup: the scratch goes on top
                session.memory_cgroup = cgroups.memory_cgroup(
                    name, (self.memory_mb + self.scratch_mb) << 20)
            except OSError:
                session.memory_cgroup = None
        scratch = self.scratch_mb << 20
        return {
            "cgroup": session.cgroup, "memory_cgroup": session.memory_cgroup,
            "workdir": str(paths.data_dir() / "sandbox" / session.name),
            "scratch_bytes": scratch, "memory_bytes": self.memory_mb << 20,
            "cpu_s": self.cpu_s, "open_files": OPEN_FILES, "processes": PROCESSES,
            "file_bytes": scratch,  # outside the jail, the only bound on the scratch folder
            "jail": jail_wanted() and self._walls_failed is None,
            "supervisor": self.supervisor,
        }


class _WallsFailed(RuntimeError):
    """The launcher entered the namespaces but could not build the walls inside them."""


class _Refused(RuntimeError):
    """The launcher will not run the code (as root, without walls); str() says why."""


class _Session:
    """One conversation's sandbox process tree and the app's end of its channel."""

    def __init__(self, owner: Sandbox, name: str) -> None:
        self.owner = owner
        self.name = name
        self.walls: dict[str, bool] = {}
        self.cgroup: str | None = None  # as root: pids (RLIMIT_NPROC exempts root)
        self.memory_cgroup: str | None = None  # as root: all its memory, tmpfs included
        self.lock = asyncio.Lock()
        self.ran = False
        self._proc: Any = None
        self._sock: socket.socket | None = None
        self._respawn_task: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[Any] | None = None  # the run's reads, while they go on
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    async def ensure(self, *, may_fall_back: bool = True) -> None:
        """Start the sandbox unless it runs. Where the walls turn out impossible (AppArmor's
        userns restriction half-allows namespaces) it starts without them, except on the
        way to a run: that run was approved for a walled sandbox, so it does not run, and
        the approval asks before every run from now on (Sandbox.unwalled)."""
        if self._proc is not None and self._proc.is_alive():
            return
        try:
            await self._start()
        except _WallsFailed as exc:
            self.owner._walls_failed = str(exc)
            if not may_fall_back:
                raise
            await self._start()

    async def _start(self) -> None:
        self.kill()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        proc = _CTX.Process(target=sandbox_main, name="llmdeck-sandbox",
                            args=(theirs, self.owner._config(self)))
        try:
            proc.start()
        finally:
            theirs.close()
        ours.setblocking(False)
        self._proc, self._sock = proc, ours
        try:
            msg = await self._read(time.monotonic() + START_TIMEOUT_S,
                                   ("ready", "failed", "refused"))
        except asyncio.CancelledError:  # half-started: its "ready" must never pass for a result
            self.kill()
            raise
        except channel.ChannelError as exc:
            self.kill()
            raise RuntimeError(f"The Python sandbox did not start ({exc}); see the log "
                               "folder for details.") from None
        if msg["t"] != "ready":
            self.kill()
            raise (_WallsFailed if msg["t"] == "failed" else _Refused)(msg["why"])
        self.walls = dict(msg["walls"])
        if self.walls.get("pid_namespace"):
            self.owner._walled_once = True

    async def _read(self, deadline: float, allowed: tuple[str, ...]) -> dict[str, Any]:
        assert self._sock is not None
        message = await channel.read_frame_async(self._sock, deadline, json_text.loads)
        return channel.check(message, allowed)

    async def run(self, code: str, timeout: float, figure_dir: str) -> RunResult:
        owner = self.owner
        async with self.lock:
            if self._closed:
                return RunResult(False, error="The Python sandbox is shut down.", kind="crashed")
            try:
                await self.ensure(may_fall_back=False)
            except _WallsFailed as exc:
                self.kill()
                return RunResult(False, kind="crashed", error=(
                    f"The code did not run: the sandbox's walls could not be built here "
                    f"({str(exc).rstrip('.')}). Without them it would run with your full "
                    "rights; run it again to do that (the python tool asks first)."))
            except _Refused as exc:
                self.kill()
                return RunResult(False, kind="crashed", error=str(exc))
            except (RuntimeError, OSError) as exc:  # could not start: a result, not a crash
                self.kill()
                return RunResult(False, kind="crashed", error=str(exc))
            self.ran = True
            pid = self._proc.pid
            run_id = uuid.uuid4().hex[:10]
            deadline = time.monotonic() + timeout
            reader = asyncio.ensure_future(self._exchange(run_id, code, deadline, figure_dir))
            self._reader = reader
            watcher = asyncio.ensure_future(_watch_memory(pid, owner.memory_mb << 20))
            try:
                await asyncio.wait({reader, watcher}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                reader.cancel()
                self.replace()
                raise
            finally:
                watcher.cancel()
            if not reader.done():
                reader.cancel()
                self.replace()
                return RunResult(False, kind="memory", reset=True, pid=pid, error=(
                    f"Stopped: the sandbox's processes together used more than its "
                    f"{owner.memory_mb} MiB memory limit."))
            try:
                reply, figures = reader.result()
            except channel.TimedOut:
                self.replace()
                return RunResult(False, kind="timeout", reset=True, pid=pid, error=(
                    f"Stopped: the code ran longer than the {timeout:g} s limit."))
            except channel.Closed:
                self.replace()
                return RunResult(False, kind="crashed", reset=True, pid=pid, error=(
                    "The Python sandbox died while running this code (out of memory or a "
                    "crash)."))
            except (channel.ChannelError, OSError) as exc:
                self.replace()
                return RunResult(False, kind="crashed", reset=True, pid=pid, error=(
                    f"The Python sandbox sent a malformed reply ({exc}), so it was stopped; "
                    "the next run starts a fresh one."))
            return self._result(reply, figures, pid)

    async def _exchange(self, run_id: str, code: str, deadline: float,
                        figure_dir: str) -> tuple[dict[str, Any], list[str]]:
        """Send the run; read its figures (written here, by the app) and its result."""
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_sendall(
                self._sock, channel.encode({"t": "run", "id": run_id, "code": code})),
                max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise channel.TimedOut("the run could not be sent in time") from None
        except OSError:
            raise channel.Closed("the sandbox is gone") from None
        figures: list[str] = []
        while True:
            reply = await self._read(deadline, ("figure", "result"))
            if reply["id"] != run_id:
                raise channel.ChannelError("an answer to a run it was not given")
            if reply["t"] == "result":
                return reply, figures
            if len(figures) >= channel.FIGURES_PER_RUN:
                raise channel.ChannelError("more figures than a run may have")
            png = channel.figure_bytes(reply)
            path = Path(figure_dir) / f"{run_id}-{len(figures) + 1}.png"
            await asyncio.to_thread(_write_figure, path, png)
            figures.append(str(path))

    def _result(self, data: dict[str, Any], figures: list[str], pid: int) -> RunResult:
        owner = self.owner
        kind, error = data["kind"], data["error"]
        if kind == "memory":
            error = (f"MemoryError: the code went over the sandbox memory limit of "
                     f"{owner.memory_mb} MiB.")
        elif kind == "cpu":
            kind, error = "timeout", (
                f"Stopped: a process of this code used more than {owner.cpu_s} s of CPU "
                "time (the sandbox's CPU limit).")
        if data["restart"]:
            owner.restarts += 1
        return RunResult(
            ok=data["ok"] and kind is None, stdout=data["stdout"], stderr=data["stderr"],
            value=data["value"], error=error, kind=kind, figures=tuple(figures),
            reset=data["restart"], pid=pid, note=data["note"])

    def replace(self) -> None:
        """Kill the sandbox (its namespaces go with it) and start a new one in the background."""
        self.kill()
        self.owner.restarts += 1
        if not self._closed:
            self._respawn_task = asyncio.ensure_future(self._respawn())

    async def _respawn(self) -> None:
        try:
            async with self.lock:
                if not self._closed:
                    await self.ensure()
        except (RuntimeError, OSError):
            pass  # the next run tries again and reports it

    def kill(self) -> None:
        proc, sock = self._proc, self._sock
        self._proc = self._sock = None
        if proc is not None:
            if proc.is_alive():
                _kill_tree(proc.pid)
            proc.join(timeout=5)
        if sock is not None:
            reader = self._reader
            if reader is not None and not reader.done():
                # Close only once its cancelled read is unwound: closed earlier, the fd
                # number goes to the next sandbox's socket and the stale read's clean-up
                # unregisters that one from the event loop (its "ready" never arrives).
                reader.cancel()
                reader.add_done_callback(lambda _: sock.close())
            else:
                sock.close()

    async def close(self) -> None:
        self._closed = True
        if self._respawn_task is not None and not self._respawn_task.done():
            self._respawn_task.cancel()
        async with self.lock:
            self.kill()
        await self._remove_cgroups()
        # Without the jail its scratch was a host folder: it goes with the sandbox, as
        # the jail's tmpfs does (a later sandbox of the conversation starts empty).
        workdir = paths.data_dir() / "sandbox" / self.name
        if workdir.is_dir():
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    async def _remove_cgroups(self) -> None:
        """The killed processes leave their cgroups within moments; then they go."""
        for attr in ("cgroup", "memory_cgroup"):
            for _ in range(40):
                path = getattr(self, attr)
                if path is None or cgroups.remove_cgroup(path):
                    setattr(self, attr, None)
                    break
                await asyncio.sleep(0.025)


def _namespaces_refused() -> str | None:
    """As a user on Linux: whether this system refuses the sandbox's namespaces, read from
    its switches (so the approval asks before the first run, not only after it failed)."""
    if os.geteuid() == 0:
        return None  # as root the sandbox runs walled or refuses: never unwalled
    for path, off, why in (
            ("/proc/sys/kernel/unprivileged_userns_clone", "0",
             "this system turns unprivileged user namespaces off"),
            ("/proc/sys/user/max_user_namespaces", "0", "this system allows no user namespaces"),
            ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
             "AppArmor restricts unprivileged user namespaces here")):
        try:
            with open(path) as f:
                if f.read().strip() == off:
                    return why
        except OSError:
            continue
    return None


def _write_figure(path: Path, png: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)


def _tree_memory(pid: int, limit_bytes: int) -> int:
    """Memory of every process below the launcher, in bytes: their resident sizes summed,
    and where that passes the limit, their proportional sizes (PSS, Linux): processes
    forked from one another share most pages, which RSS counts once per process (sixty
    forks of a 10 MiB interpreter are not 600 MiB). PSS costs a page-table walk per
    process, so it is read only when the cheap sum is over."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    sizes: dict[int, int] = {}
    for child in children:
        with contextlib.suppress(psutil.Error):
            sizes[child.pid] = child.memory_info().rss
    total = sum(sizes.values())
    if total <= limit_bytes or not sys.platform.startswith("linux"):
        return total
    for child in children:
        with contextlib.suppress(psutil.Error):  # the supervisor is undumpable: its RSS
            sizes[child.pid] = child.memory_full_info().pss  # stands where PSS is closed
    return sum(sizes.values())


async def _watch_memory(pid: int, limit_bytes: int) -> int:
    """Returns (with the total) once the sandbox's processes together pass the limit."""
    while True:
        await asyncio.sleep(MEMORY_CHECK_S)
        total = await asyncio.to_thread(_tree_memory, pid, limit_bytes)
        if total > limit_bytes:
            return total


def _kill_tree(pid: int) -> None:
    """SIGKILL the launcher, its process group and every descendant.

    Behind the Linux walls the kernel would end them anyway (the supervisor is PID 1 of
    its own PID namespace and dies with the launcher); without them this is what reaches
    a child that left the group (setsid), as long as it is still a descendant."""
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


@atexit.register
def _kill_all() -> None:
    for sandbox in list(_ALL):
        sandbox._closed = True
        sessions = list(sandbox._sessions.values()) + (
            [sandbox._spare] if sandbox._spare is not None else [])
        for session in sessions:
            session._closed = True
            session.kill()
            for path in (session.cgroup, session.memory_cgroup):
                if path is not None:  # still populated for a moment: the next app's
                    cgroups.remove_cgroup(path)  # sandbox sweeps what is left
