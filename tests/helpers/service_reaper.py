"""No engine service outlives the test whose home started it.

Apps and CLIs a test starts in a terminal run as a user's do (tests/conftest.py): the
first `llmdeck` on a home starts that home's detached service (core.service.launch),
which stays after the app quits, as it does for a user. At each test's teardown the
services whose LLMDECK_HOME lies under the test's tmp_path are stopped as `llmdeck
service stop` stops them (SIGTERM: the same graceful stop, core.service.process), given
STOP_WAIT_S, then killed with their workers; one still alive after that fails the test.

Services are found through /proc (cmdline, then the environment of the few candidates):
a scan costs about a millisecond, so every test pays it, whatever it starts.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

STOP_WAIT_S = 10.0
KILL_WAIT_S = 5.0
# How a service runs: detached (`python -m core.service`) or in the foreground
# (`llmdeck service run`, `python -m tui.cli service run`).
_MARKS = (b"-m\0core.service", b"service\0run")
# Where a home can come from: LLMDECK_HOME, or the user's folders when it is unset.
_HOMES = (b"LLMDECK_HOME=", b"HOME=", b"XDG_DATA_HOME=", b"XDG_RUNTIME_DIR=")


def services_under(root: Path) -> list[int]:
    """The live service processes of this user whose home (LLMDECK_HOME, else HOME or an
    XDG folder) lies under `root`."""
    prefix = os.fsencode(str(root.resolve())).rstrip(b"/") + b"/"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            if not any(mark in cmdline for mark in _MARKS):
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        homes = [v.partition(b"=")[2] for v in environ if v.startswith(_HOMES)]
        if any((os.path.realpath(h) + b"/").startswith(prefix) for h in homes if h) \
                and _alive(int(name)):
            found.append(int(name))
    return found


def stop_services_under(root: Path) -> list[str]:
    """Stop every service under `root` (SIGTERM, then SIGKILL with its descendants after
    STOP_WAIT_S); a line for each one that survived even that (none should)."""
    pids = services_under(root)
    if not pids:
        return []
    kids = {pid: _descendants(pid) for pid in pids}
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    left = _wait_gone(pids, STOP_WAIT_S)
    for pid in left:
        for victim in (pid, *kids[pid], *_descendants(pid)):
            _signal(victim, signal.SIGKILL)
    survivors = _wait_gone(left, KILL_WAIT_S)
    orphans = _wait_gone([k for pid in pids for k in kids[pid]], KILL_WAIT_S)
    for kid in orphans:  # workers die with their service (PR_SET_PDEATHSIG): a backstop
        _signal(kid, signal.SIGKILL)
    return [f"pid {pid}: {_cmdline(pid)}" for pid in survivors]


def _descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return "?"
