"""The sandbox launcher: the process the app spawns, which puts up the walls (jail.py) and
then runs the supervisor (supervisor.py) as a fresh interpreter behind them.

A fresh interpreter (execve) rather than the spawned one for two reasons: its environment
is the scrubbed one from the first byte (/proc/self/environ of a process whose
os.environ was merely cleared still shows the app's), and on Linux it must be a child of
the launcher anyway, to be PID 1 of the new PID namespace. The launcher then only waits
and exits as the supervisor did, so the app's process handle follows the sandbox's life.

Where the walls cannot go up the launcher says so on the channel ("failed": the app
starts it again without them, config "jail" off; "refused": as root it never runs
unwalled) and exits.
Without the walls (no user namespaces, LLMDECK_SANDBOX_JAIL=0) it execs the supervisor
in place, with the limits, its own session and a subreaper flag; on macOS through
sandbox-exec. The launcher only ever writes frames to the channel; it reads nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from core.tools.sandbox import cgroups, channel, jail, macos_profile
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
JAIL_TMP = "/tmp"  # inside the jail: a tmpfs of the scratch size, HOME and working folder
_SUPERVISOR = str(Path(__file__).resolve().with_name("supervisor.py"))


def clean_env(home: str) -> dict[str, str]:
    """All the environment the code sees: nothing of the app's (keys, tokens, paths)."""
    return {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin",
                                 "/bin"]),
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(home, ".matplotlib"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # BLAS thread pools reserve address space per thread, against the memory limit.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _supervisor_argv(script: list[str], fd: int, walls: dict[str, bool]) -> list[str]:
    # A script, standard library only: a fresh sandbox answers in a fraction of a second.
    # `script` is the app's choice: supervisor.py, or in tests a hostile stand-in.
    setup = json.dumps({"fd": fd, "walls": walls})
    return [sys.executable, "-P", *script, setup]  # -P: its folder is not on sys.path


def _say(sock: socket.socket, kind: str, why: str) -> None:
    try:
        channel.send(sock, {"t": kind, "why": why[:channel.NOTE_LIMIT]}, timeout=5)
    except (OSError, ValueError):
        pass


def sandbox_main(sock: socket.socket, config: dict[str, Any]) -> None:
    """Entry point of the spawned launcher; `config` comes from the app (client.py)."""
    start_child(log_name=None)  # die with the app, /dev/null, no Ctrl+C, own session
    for key in ("cgroup", "memory_cgroup"):
        if config.get(key):
            try:
                cgroups.join_cgroup(config[key])  # before any fork: every child is counted
            except OSError:
                pass
    fd = sock.fileno()
    os.set_inheritable(fd, True)
    limits = Limits(memory_bytes=config["memory_bytes"], cpu_s=config["cpu_s"],
                    open_files=config["open_files"], processes=config["processes"],
                    file_bytes=config["file_bytes"])
    as_root = os.geteuid() == 0
    if sys.platform.startswith("linux") and config.get("jail", True):
        try:
            jail.unshare_namespaces()
        except OSError as exc:
            # Never host root without the walls; as a user, the app decides (it starts
            # again without them, and asks the person before each run from then on).
            _say(sock, "refused" if as_root else "failed",
                 _refusal(exc) if as_root else str(exc))
            os._exit(EXIT_WALLS_FAILED)
        else:
            die_with_parent()  # a change of credentials clears it
            _run_jailed(sock, fd, config, limits, as_root)
    workdir: str = config["workdir"]
    os.makedirs(workdir, exist_ok=True)
    adopt_orphans()
    # Outside a user namespace RLIMIT_NPROC counts every process of the user (the
    # desktop's included), so the sandbox's allowance goes on top of what runs now.
    apply_limits(dataclasses.replace(limits, processes=_user_processes() + limits.processes))
    walls = jail.Walls()
    if sys.platform.startswith("linux"):
        try:  # no namespaces, but no new privileges, capabilities or dangerous calls
            walls = walls.locked(jail.lock_down())
        except OSError:
            pass  # the kernel refused even that: the walls say so
    argv = _supervisor_argv(config.get("supervisor") or [_SUPERVISOR], fd, walls.as_dict())
    if sys.platform == "darwin" and os.path.exists(SANDBOX_EXEC):
        profile = macos_profile.macos_profile([workdir], _runs_from(), allow_fork=True)
        argv = [SANDBOX_EXEC, "-p", profile, *argv]
    os.chdir(workdir)
    os.execve(argv[0], argv, clean_env(workdir))


def _refusal(exc: BaseException) -> str:
    detail = str(exc) if isinstance(exc, jail.JailError) else f"{type(exc).__name__}: {exc}"
    return (f"The Python sandbox will not run: {detail.rstrip('.')}. llmdeck runs as root "
            "here, and without its walls the code would run as root on this machine; run "
            "llmdeck as an ordinary user, or allow user namespaces.")


def _runs_from() -> list[str]:
    """The folders the sandbox needs to start and import: the interpreter's, its (virtual)
    environment's and the supervisor's and runner's scripts."""
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(sys.executable), os.path.dirname(_SUPERVISOR)]


def _user_processes() -> int:
    """How many processes the user runs now (all of them count against RLIMIT_NPROC)."""
    try:
        import psutil

        uid = os.getuid()
        return sum(1 for p in psutil.process_iter(["uids"])
                   if p.info["uids"] is not None and p.info["uids"].real == uid)
    except Exception:  # noqa: BLE001 - unknown: no process limit rather than a wrong one
        return 1 << 20


def _run_jailed(sock: socket.socket, fd: int, config: dict[str, Any], limits: Limits,
                as_root: bool) -> None:
    """Fork PID 1 of the new namespaces, build the walls there, exec the supervisor; wait."""
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent()  # the launcher's death (the app killed it) ends the namespace
            own_session()
            # No host folder is writable: /tmp (a tmpfs of the scratch size) is all there is.
            walls = jail.build_walls(config["scratch_bytes"], _runs_from())
            apply_limits(limits)
            os.chdir(JAIL_TMP)
            walls = walls.locked(jail.lock_down())  # the last step before the exec
            argv = _supervisor_argv(config.get("supervisor") or [_SUPERVISOR], fd,
                                    walls.as_dict())
            os.execve(argv[0], argv, clean_env(JAIL_TMP))
        except BaseException as exc:  # noqa: BLE001 - anything here is reported, then exit
            if as_root:
                _say(sock, "refused", _refusal(exc))
            else:
                _say(sock, "failed", f"its walls could not be built ({exc})")
            os._exit(EXIT_WALLS_FAILED)
    sock.close()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # die the same way, so the exit reads the same
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
