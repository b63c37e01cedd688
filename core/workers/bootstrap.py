"""How every child process llmdeck starts (model workers, the documents worker, the Python
sandbox, and the ones to come): one place decides how a child behaves beside the app.

- It dies with the app: PR_SET_PDEATHSIG on Linux; elsewhere the child's own loop polls
  `parent_alive` (a parent check the workers already do between messages).
- Its stdout/stderr never reach the terminal the app draws on: a log file for library
  diagnostics (never conversation text), or /dev/null.
- Ctrl+C in the terminal belongs to the app, not to the child.
- It runs in its own session and process group, so the app ends it and whatever it started
  with one `killpg`, and the terminal's job control (Ctrl+Z) never stops it mid-step.
- Resource limits (address space, CPU seconds, open files, processes, file size) when the
  caller asks: the sandbox does; model workers do not (a model needs what it needs).

Imports only the standard library (and core.paths for the log folder): a spawned child
pays for what it imports before it can answer.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for a child; 0 leaves that limit as inherited."""

    memory_bytes: int = 0  # RLIMIT_AS: a memory bomb raises MemoryError instead of swapping
    cpu_s: int = 0  # RLIMIT_CPU, per process: SIGXCPU past it, SIGKILL 5 s later
    open_files: int = 0  # RLIMIT_NOFILE
    processes: int = 0  # RLIMIT_NPROC (the kernel does not apply it to root)
    file_bytes: int = 0  # RLIMIT_FSIZE: no single file grows past it


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies (True when it could).

    The kernel clears this on a change of credentials, so call it again after one."""
    return _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def adopt_orphans() -> bool:
    """Become a child subreaper (Linux): a grandchild whose parent exits (a double fork,
    a `start_new_session` daemon) is re-parented here instead of to init, so it stays
    among our descendants and can be found and killed."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def parent_alive(parent_pid: int) -> bool:
    """For the child's own loop where PR_SET_PDEATHSIG does not exist (macOS)."""
    return os.getppid() == parent_pid


def quiet_stdio(log_name: str | None = "worker") -> None:
    """Point fds 1 and 2 at `<log dir>/<log_name>-<pid>.log`, or /dev/null for None.

    The app owns the terminal: a native library's log line (llama.cpp, MLX) or code
    writing below sys.stdout (os.system, C extensions) would land on top of the UI.
    """
    target = None
    if log_name is not None:
        try:
            from core import paths

            target = os.open(paths.log_dir() / f"{log_name}-{os.getpid()}.log",
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            target = None
    if target is None:
        target = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            os.dup2(target, fd)
        except OSError:
            pass
    os.close(target)


def own_session() -> None:
    """Leave the app's session and process group (a no-op when already a leader)."""
    try:
        os.setsid()
    except OSError:
        pass


def apply_limits(limits: Limits) -> list[str]:
    """Set each asked-for limit (soft and hard); return the names the platform refused
    (macOS refuses RLIMIT_AS, for one) so the caller can say what does not hold."""
    try:
        import resource
    except ImportError:
        return ["all"]
    refused: list[str] = []
    for name, value in (("RLIMIT_AS", limits.memory_bytes), ("RLIMIT_CPU", limits.cpu_s),
                        ("RLIMIT_NOFILE", limits.open_files), ("RLIMIT_NPROC", limits.processes),
                        ("RLIMIT_FSIZE", limits.file_bytes)):
        if value <= 0:
            continue
        which = getattr(resource, name, None)
        try:
            if which is None:
                raise ValueError(name)
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # CPU: the soft limit sends SIGXCPU, which a child can catch to say why it
            # stops; the hard one (SIGKILL) is the backstop.
            top = value + 5 if name == "RLIMIT_CPU" else value
            top = top if hard == resource.RLIM_INFINITY else min(top, hard)
            resource.setrlimit(which, (value, top))
        except (ValueError, OSError):
            refused.append(name)
    return refused


def start_child(*, log_name: str | None = "worker", limits: Limits | None = None) -> list[str]:
    """The first call of every child process; returns the limits that could not be set."""
    die_with_parent()
    quiet_stdio(log_name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the terminal is the app's
    own_session()
    return apply_limits(limits) if limits is not None else []
