"""The sandbox's totals, as root on Linux: RLIMIT_NPROC does not bind root, so a pids
cgroup caps how many processes the code may start and a memory cgroup caps the memory of
all of them together (tmpfs pages included), v1 or v2. The client makes them before the
launch (`pids_cgroup`, `memory_cgroup`), the launcher joins them before any fork
(`join_cgroup`), and the client removes them when the session ends (`remove_cgroup`)."""

from __future__ import annotations

import contextlib
import os
import sys


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


CGROUP_PREFIX = "llmdeck-sandbox-"


def _pids_hierarchy() -> str | None:
    """Where a pids cgroup can be made: cgroup v1's pids mount, or v2's root."""
    if os.path.isfile("/sys/fs/cgroup/pids/cgroup.procs"):
        return "/sys/fs/cgroup/pids"
    try:
        with open("/sys/fs/cgroup/cgroup.subtree_control") as f:
            return "/sys/fs/cgroup" if "pids" in f.read().split() else None
    except OSError:
        return None


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for `controller` (v1), or its v2 path ("" for "")."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(","):
                    return path
    except (OSError, ValueError):
        pass
    return None


def _has(path: str, controller: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.subtree_control")) as f:
            return controller in f.read().split()
    except OSError:
        return False


def _memory_hierarchy() -> tuple[str, int] | None:
    """(folder to make a memory cgroup in, cgroup version). Under our own cgroup where
    possible, so the sandbox still counts against the limits the app itself runs under."""
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isfile(os.path.join(v1, "cgroup.procs")):
        own = _own_cgroup("memory")
        nested = os.path.join(v1, own.lstrip("/")) if own else v1
        return (nested if os.path.isdir(nested) else v1), 1
    v2 = "/sys/fs/cgroup"
    if not os.path.isfile(os.path.join(v2, "cgroup.controllers")):
        return None
    own = _own_cgroup("")
    nested = os.path.join(v2, own.lstrip("/")) if own else v2
    if own and os.path.isdir(nested) and _has(nested, "memory"):
        return nested, 2
    return (v2, 2) if _has(v2, "memory") else None


def _sweep(base: str, keep: str) -> None:
    """Remove empty sandbox cgroups whose app (the pid in their name) is gone."""
    try:
        entries = os.listdir(base)
    except OSError:
        return
    for entry in entries:
        if entry.startswith(CGROUP_PREFIX) and entry != keep:
            owner = entry[len(CGROUP_PREFIX):].split("-")[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(base, entry))


def pids_cgroup(name: str, limit: int) -> str | None:
    """As root, a pids cgroup capped at `limit` for one sandbox (None where there is
    none to make: not root, not Linux, no pids controller). Empty ones left by an app
    that died are removed on the way."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or limit <= 0:
        return None
    base = _pids_hierarchy()
    if base is None:
        return None
    _sweep(base, name)
    path = os.path.join(base, name)
    try:
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "pids.max"), str(limit))
    except OSError:
        return None
    return path


def memory_cgroup(name: str, limit_bytes: int) -> str | None:
    """As root, a memory cgroup capping all of one sandbox's processes together at
    `limit_bytes` (their tmpfs files included), swap included where the kernel accounts
    it: past it the kernel's OOM killer ends a process of the sandbox, not of the app.
    None where there is none to make (not root, not Linux, no memory controller).
    `join_cgroup` puts the launcher in it before any fork; `remove_cgroup` ends it."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or limit_bytes <= 0:
        return None
    found = _memory_hierarchy()
    if found is None:
        return None
    base, version = found
    _sweep(base, name)
    path = os.path.join(base, name)
    try:
        os.makedirs(path, exist_ok=True)
        if version == 1:
            files = [os.path.join(path, "memory.limit_in_bytes")]
            swap = os.path.join(path, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # memory + swap together: no swapping past the cap
                files.append(swap)
            try:  # memsw may never be below the plain limit: raise it first, lower it last
                for file in files:
                    _write(file, str(limit_bytes))
            except OSError:
                for file in reversed(files):
                    _write(file, str(limit_bytes))
        else:
            _write(os.path.join(path, "memory.max"), str(limit_bytes))
            swap = os.path.join(path, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    return path


def join_cgroup(path: str) -> None:
    """Move the calling process (and so every process it starts) into `path`."""
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def remove_cgroup(path: str) -> bool:
    """Remove an emptied cgroup (False while a killed process is still on its way out)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
