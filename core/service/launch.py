"""Starting the service detached: its own session, stdio to the service log, and the
launcher waiting for the socket to answer.

The service must outlive the terminal that started it (a TUI over SSH): a new session
(setsid) so the terminal's SIGHUP and Ctrl+C never reach it; stdin from /dev/null and
stdout/stderr into <log dir>/service.log (0600), never the launcher's terminal. A thread
reaps it if it exits while the launcher still runs, so no zombie stays.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from core import paths
from core.service.client import START_TIMEOUT_S, ServiceClient, ServiceUnavailable, connect

EXIT_TAKEN = 3  # core.service.process: another service holds the home (it will answer)
EXIT_APP_RUNS = 4  # core.service.process: an --in-process app owns this home's engine
LOG_NAME = "service.log"
LOG_MAX_BYTES = 5 * 2**20


def log_path() -> Path:
    return paths.log_dir() / LOG_NAME


def spawn_detached(service_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    _rotate(log_path())
    log_fd = os.open(log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.service", *service_args], cwd=str(root), env=env,
            stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, start_new_session=True,
            close_fds=True)
    finally:
        os.close(log_fd)
    threading.Thread(target=proc.wait, name="llmdeck-service-reaper", daemon=True).start()
    return proc


def _rotate(path: Path) -> None:
    """Keep the log to two files of at most LOG_MAX_BYTES: the current and the one before."""
    try:
        if path.stat().st_size > LOG_MAX_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    except OSError:
        pass


def log_tail(lines: int = 3) -> str:
    """The service log's last lines (where a failed start says why)."""
    try:
        with open(log_path(), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    from core.terminal_text import visible

    return visible(" / ".join(text.strip().splitlines()[-lines:]))


async def wait_for_service(proc: subprocess.Popen[bytes], client: str,
                           timeout: float) -> ServiceClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await connect(client, timeout=max(0.5, deadline - time.monotonic()))
        except ServiceUnavailable as exc:
            if not isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
                raise
        code = proc.poll()
        if code is not None and code != EXIT_TAKEN:
            raise ServiceUnavailable(f"The llmdeck service exited as it started (code {code}): "
                                     f"{log_tail() or 'no reason logged'}. Its log: {log_path()}.")
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(f"The llmdeck service did not open its socket within "
                                     f"{timeout:.0f} s. Its log: {log_path()}.")
        await asyncio.sleep(0.1)


async def start_or_connect(client: str = "tui", *, timeout: float = START_TIMEOUT_S,
                           service_args: tuple[str, ...] = ()) -> ServiceClient:
    """Connect to this home's service, starting it first when none runs; waits up to
    `timeout` for a new one's socket. ServiceUnavailable with the log's last words when
    it exits at start."""
    try:
        return await connect(client)
    except ServiceUnavailable as exc:
        if not isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
            raise
    proc = await asyncio.to_thread(spawn_detached, service_args)
    return await wait_for_service(proc, client, timeout)


async def wait_to_connect(client: str = "tui", *, timeout: float = START_TIMEOUT_S) -> ServiceClient:
    """Connect to the service someone else is starting (`llmdeck service restart`), without
    starting one; ServiceUnavailable when none answers within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await connect(client, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        except ServiceUnavailable as exc:
            if not isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
                raise
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(f"No llmdeck service came back within {timeout:.0f} s "
                                     f"after the restart. Its log: {log_path()}.")
        await asyncio.sleep(0.1)
