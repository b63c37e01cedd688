"""The sandbox launcher: the process the app spawns, which puts up the walls (jail.py) and
then runs the sandbox worker (worker.serve) as a fresh interpreter behind them.

A fresh interpreter (execve) rather than the spawned one for two reasons: its environment
is the scrubbed one from the first byte (/proc/self/environ of a process whose
os.environ was merely cleared still shows the app's), and on Linux it must be a child of
the launcher anyway, to be PID 1 of the new PID namespace. The launcher then only waits
and exits as the worker did, so the app's process handle (and its sentinel) follows the
worker's life. Where the walls cannot go up (no user namespaces; LLMDECK_SANDBOX_JAIL=0)
the launcher execs the worker in place, with the limits, its own session and a subreaper
flag, and the worker sweeps its descendants after each run; on macOS through sandbox-exec.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.tools.sandbox import jail
from core.workers.bootstrap import (
    Limits,
    adopt_orphans,
    apply_limits,
    die_with_parent,
    own_session,
    start_child,
)

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
EXIT_WALLS_FAILED = 71
_WORKER_SCRIPT = str(Path(__file__).resolve().with_name("worker.py"))


def clean_env(workdir: str, tmp: str) -> dict[str, str]:
    """All the environment the code sees: nothing of the app's (keys, tokens, paths)."""
    return {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin",
                                 "/bin"]),
        "HOME": workdir,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(workdir, ".matplotlib"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # BLAS thread pools reserve address space per thread, against the memory limit.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _worker_argv(fd: int, parent_pid: int, workdir: str, walls: jail.Walls) -> list[str]:
    # The worker module runs as a script: standard library only, no package imports, so
    # a fresh sandbox answers in a fraction of a second.
    setup = json.dumps({"fd": fd, "parent_pid": parent_pid, "workdir": workdir,
                        "walls": walls.as_dict()})
    return [sys.executable, "-P", _WORKER_SCRIPT, setup]  # -P: its folder is not on sys.path


def sandbox_main(conn: Connection, config: dict[str, Any]) -> None:
    """Entry point of the spawned launcher; `config` comes from Sandbox (client.py)."""
    start_child(log_name=None)  # die with the app, /dev/null, no Ctrl+C, own session
    if config.get("cgroup"):
        try:
            jail.join_cgroup(config["cgroup"])  # before any fork: every child is counted
        except OSError:
            pass
    fd = conn.fileno()
    os.set_inheritable(fd, True)
    workdir: str = config["workdir"]
    writable: list[str] = list(config["writable"])
    for path in writable:
        os.makedirs(path, exist_ok=True)
    limits = Limits(memory_bytes=config["memory_bytes"], cpu_s=config["cpu_s"],
                    open_files=config["open_files"], processes=config["processes"],
                    file_bytes=config["file_bytes"])
    if sys.platform.startswith("linux") and config.get("jail", True):
        try:
            jail.unshare_namespaces()
        except OSError:
            pass  # user namespaces are off here: the fallback below, reported as walls
        else:
            die_with_parent()  # a change of credentials clears it
            _run_jailed(conn, fd, workdir, writable, limits)
    adopt_orphans()
    # Outside a user namespace RLIMIT_NPROC counts every process of the user (the
    # desktop's included), so the sandbox's allowance goes on top of what runs now.
    apply_limits(dataclasses.replace(limits, processes=_user_processes() + limits.processes))
    tmp = os.path.join(workdir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    argv = _worker_argv(fd, config["parent_pid"], workdir, jail.Walls())
    if sys.platform == "darwin" and os.path.exists(SANDBOX_EXEC):
        argv = [SANDBOX_EXEC, "-p", jail.macos_profile(writable), *argv]
    os.chdir(workdir)
    os.execve(argv[0], argv, clean_env(workdir, tmp))


def _runs_from() -> list[str]:
    """The folders the worker needs to start and import: the interpreter's, its (virtual)
    environment's and the worker script's."""
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(sys.executable), os.path.dirname(_WORKER_SCRIPT)]


def _user_processes() -> int:
    """How many processes the user runs now (all of them count against RLIMIT_NPROC)."""
    try:
        import psutil

        uid = os.getuid()
        return sum(1 for p in psutil.process_iter(["uids"])
                   if p.info["uids"] is not None and p.info["uids"].real == uid)
    except Exception:  # noqa: BLE001 - unknown: no process limit rather than a wrong one
        return 1 << 20


def _run_jailed(conn: Connection, fd: int, workdir: str, writable: list[str],
                limits: Limits) -> None:
    """Fork PID 1 of the new namespaces, build the walls there, exec the worker; wait."""
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent()  # the launcher's death (the app killed it) ends the namespace
            own_session()
            walls = jail.build_walls(writable, tmp_bytes=max(limits.memory_bytes, 64 << 20),
                                     needed=_runs_from())
            apply_limits(limits)
            os.chdir(workdir)
            argv = _worker_argv(fd, 0, workdir, walls)
            os.execve(argv[0], argv, clean_env(workdir, "/tmp"))
        except BaseException as exc:  # noqa: BLE001 - anything here is reported, then exit
            try:
                conn.send(("failed", f"its walls could not be built ({exc})"))
            finally:
                os._exit(EXIT_WALLS_FAILED)
    conn.close()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # die the same way, so the app reads the cause (SIGXCPU)
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
