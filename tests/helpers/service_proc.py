"""A real engine service for tests: started with the real `llmdeck service start` on the
test's home (the scripted engine), found by pid, and never left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]


def llmdeck(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`llmdeck ARGS` as a person types it, on the test's LLMDECK_HOME."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)


def scripted_args(reply: str = "Hello from the service.", **options: Any) -> list[str]:
    out = ["--engine", "scripted"]
    for key, value in {"label": "scripted", "reply": reply, "fixed_timing": True,
                       **options}.items():
        out += ["--option", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return out


def start(*service_args: str) -> int:
    """Start the service (detached, as `llmdeck service start` does); its pid."""
    done = llmdeck("service", "start", *service_args)
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"\(pid (\d+)\)", done.stdout)
    assert match, done.stdout
    return int(match.group(1))


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def socket_path() -> Path:
    from core.service.socket_path import socket_path as path

    return path()


def raw_client(hello: bool = True) -> socket.socket:
    """A plain socket on the service, greeted (the protocol by hand, as socat would)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(socket_path()))
    if hello:
        sock.sendall(b'{"hello": {"protocol": 1, "client": "test"}}\n')
        assert b'"hello"' in read_line(sock)
    return sock


def read_line(sock: socket.socket, limit: int = 64 * 2**20) -> bytes:
    data = bytearray()
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return bytes(data)


@contextmanager
def no_service_left(home: Path) -> Iterator[None]:
    """Whatever the test does, no service of `home` (nor any of its workers) outlives it."""
    try:
        yield
    finally:
        lock = home / "data" / "service.lock"
        try:
            pid = int(lock.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = 0
        if pid and alive(pid):
            kids = descendants(pid)
            os.kill(pid, signal.SIGKILL)
            for kid in kids:
                try:
                    os.kill(kid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def home_service_pid(home: Path) -> int:
    """The pid in `home`'s service lock (0 when none was written)."""
    try:
        return int((home / "data" / "service.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def workers_stay_with_the_service(workers: list[int], home: Path) -> None:
    """After its app quits, the models an app used stay loaded in `home`'s service (the next
    app attaches to them, as a user's does); `llmdeck service stop` takes every worker."""
    from tests.helpers.procs import wait_gone

    pid = home_service_pid(home)
    assert pid and alive(pid), "the home's service runs on after the app"
    assert workers and set(workers) <= set(descendants(pid)), "the workers are the service's"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLMDECK_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "tui.cli", "service", "stop"], env=env,
                          capture_output=True, text=True, timeout=90, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and f"stopped (pid {pid})" in done.stdout, done.stdout + done.stderr
    assert wait_gone([pid, *workers], 10) == [], "no worker outlives `llmdeck service stop`"
