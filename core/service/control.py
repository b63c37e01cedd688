"""`llmdeck service start|stop|restart|status` (and the hidden `run`, the service itself).

Each prints one short answer a person can act on; status exits 3 when no service runs
(as service managers do), so scripts can ask.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from core.service.client import ServiceUnavailable, connect
from core.service.launch import start_or_connect

STOP_WAIT_S = 60.0
NOT_RUNNING = 3

USAGE = """usage: llmdeck service {start,stop,restart,status}

  start     start the engine service for this home (the app starts it by itself too)
  stop      stop it: replies still streaming are stored as stopped, models unload
  restart   stop it, then start it
  status    pid, uptime, clients (apps and servers attached; this command is not
            counted), models loaded, memory (exit 3 when none runs)
"""


def _home() -> str:
    from core.home_lock import home_label

    return home_label()


def _nobody_listens(exc: ServiceUnavailable) -> bool:
    return isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError))


async def _status() -> dict[str, Any] | None:
    """The status, None when no service runs; ServiceUnavailable when one is there and
    will not talk (another user's socket, another protocol): that is said, not hidden."""
    try:
        client = await connect("cli")
    except ServiceUnavailable as exc:
        if _nobody_listens(exc):
            return None
        raise
    try:
        return await client.call("status", timeout=10)
    finally:
        await client.close()


def service_status() -> dict[str, Any] | None:
    """The running service's status, or None (for doctor and `llmdeck workers`)."""
    try:
        return asyncio.run(_status())
    except ServiceUnavailable:
        return None


def workers_main() -> int | None:
    """`llmdeck workers` answered by the engine service when one runs; None when none
    does (the caller falls back to the status files of an app or a server)."""
    from core.service.client import run_call

    try:
        statuses = run_call("worker_status", timeout=10)
    except ServiceUnavailable:
        return None
    from core.workers.status_file import format_table, read_status, status_path

    print("llmdeck service:")
    print(format_table(statuses) if statuses else "No model is loaded.")
    for role, label in (("app", "llmdeck"), ("serve", "llmdeck serve --standalone")):
        others, problem = read_status(status_path(role))  # one with its own pool, beside
        if problem is None:
            print(f"\n{label}:")
            print(format_table(others) if others else "No model is loaded.")
    return 0


def status_line(status: dict[str, Any]) -> str:
    """One line of the service's status for F4 (the client's mirror carries it)."""
    from core.wire.hub import human_bytes

    up = int(status.get("uptime_s") or 0)
    uptime = f"{up // 3600}h{up % 3600 // 60:02d}m" if up >= 3600 else f"{up // 60}m{up % 60:02d}s"
    clients, turns = int(status.get("clients") or 0), int(status.get("turns") or 0)
    memory = (int(status.get("rss_bytes") or 0) + int(status.get("workers_rss_bytes") or 0))
    parts = [f"Engine service pid {status.get('pid')}", f"up {uptime}",
             f"{clients} client{'s' if clients != 1 else ''}",
             f"{turns} repl{'ies' if turns != 1 else 'y'} streaming",
             f"{human_bytes(memory)} with its workers"]  # the pane's units: decimal
    watched = status.get("memory")
    if isinstance(watched, dict) and watched.get("total_bytes"):
        free = int(watched.get("available_bytes") or 0) / 1e9
        parts.append(f"{free:.1f} GB free" + (" (low)" if watched.get("pressure") else ""))
        if watched.get("unloaded"):
            parts.append("unloaded for memory: " + ", ".join(map(str, watched["unloaded"])))
    if status.get("http"):
        parts.append(f"serving {status['http']}")
    return " · ".join(parts)


def other_clients(status: dict[str, Any]) -> int:
    """The clients in a status that `llmdeck service status` (or doctor) asked for over
    its own connection: all but the asker (after every app quit, "clients 1" was itself)."""
    return max(int(status.get("clients") or 0) - 1, 0)


def format_status(status: dict[str, Any], *, asking: bool = False) -> str:
    """The status as `llmdeck service status` prints it; `asking`: the status came over this
    command's own connection, which is not counted as a client."""
    from core.terminal_text import visible
    from core.wire.hub import human_bytes

    up = int(status.get("uptime_s") or 0)
    uptime = f"{up // 3600}h{up % 3600 // 60:02d}m" if up >= 3600 else f"{up // 60}m{up % 60:02d}s"
    rss = int(status.get("rss_bytes") or 0)
    workers = int(status.get("workers_rss_bytes") or 0)
    models = ", ".join(visible(str(m)) for m in status.get("models") or []) or "none loaded"
    lines = [f"pid      {status.get('pid')}",
             f"uptime   {uptime}",
             f"clients  {other_clients(status) if asking else status.get('clients')}  "
             f"(replies streaming: {status.get('turns')})",
             f"models   {models}",
             f"memory   {human_bytes(rss + workers)}  (service {human_bytes(rss)}, "
             f"workers {human_bytes(workers)})",  # decimal, as F4, doctor and the hub
             f"socket   {status.get('socket')}"]
    if status.get("http"):
        lines.append(f"http     {status['http']}")
    idle = status.get("idle_exit_s")
    lines.append(f"idle     exits after {idle / 60:.0f} min with no client" if idle
                 else "idle     never exits by itself")
    return "\n".join(lines)


async def _stop(restart: bool = False) -> int | None:
    """Ask the service to stop and wait for it to exit; its pid, or None if none ran.
    `restart`: its clients are told a new one follows (they wait for it)."""
    try:
        client = await connect("cli")
    except ServiceUnavailable as exc:
        if _nobody_listens(exc):
            return None
        raise
    pid = client.pid
    try:
        await client.call("shutdown", timeout=10, **({"restart": True} if restart else {}))
    except ServiceUnavailable:
        pass  # it went while answering: what we asked for
    finally:
        await client.close()
    deadline = time.monotonic() + STOP_WAIT_S
    while pid and _alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if pid and _alive(pid):
        raise ServiceUnavailable(f"The llmdeck service (pid {pid}) did not stop within "
                                 f"{STOP_WAIT_S:.0f} s; `kill {pid}` ends it.")
    return pid or 0


def _alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - gone between the two questions
        return False


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):  # as `llmdeck models` does: help, exit 0
        sys.stdout.write(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from core.service.process import main as run_main

        return run_main(rest)
    try:
        if command == "status":
            status = asyncio.run(_status())
            if status is None:
                print(f"llmdeck service: not running on {_home()}.")
                return NOT_RUNNING
            print(format_status(status, asking=True))
            return 0
        if command in ("stop", "restart"):
            pid = asyncio.run(_stop(restart=command == "restart"))
            if pid is None and command == "stop":
                print(f"llmdeck service: not running on {_home()}.")
                return 0
            if pid is not None:
                print(f"llmdeck service: stopped (pid {pid}).")
            if command == "stop":
                return 0
        if command in ("start", "restart"):
            return _start(rest)
    except ServiceUnavailable as exc:
        print(f"llmdeck service: {exc.message}", file=sys.stderr)
        return 1
    print(f"llmdeck service: unknown command {command!r}.\n{USAGE}", file=sys.stderr)
    return 2


def _start(service_args: list[str]) -> int:
    async def _go() -> tuple[int | None, bool]:
        try:
            client = await connect("cli")
            existed = True
        except ServiceUnavailable as exc:
            if not _nobody_listens(exc):
                raise
            client = await start_or_connect("cli", service_args=tuple(service_args))
            existed = False
        pid = client.pid
        await client.close()
        return pid, existed

    pid, existed = asyncio.run(_go())
    word = "already running" if existed else "started"
    print(f"llmdeck service: {word} (pid {pid}) on {_home()}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
