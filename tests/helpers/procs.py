"""Finding llmdeck worker processes, to prove none is left behind."""

from __future__ import annotations

import time

import psutil


def worker_pids(parent_pid: int | None = None) -> list[int]:
    """Live llmdeck worker processes (optionally only children of parent_pid)."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "ppid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "multiprocessing" in cmd and "spawn_main" in cmd:
            if parent_pid is None or _descends_from(proc, parent_pid):
                out.append(proc.info["pid"])
    return out


def _descends_from(proc: psutil.Process, ancestor: int) -> bool:
    try:
        return any(p.pid == ancestor for p in proc.parents())
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of pids is alive; return the ones still alive at the timeout."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
