"""The engine service: one long-lived process per home owning the Runtime (worker pool,
store writer, turns, tools, MCP), and the clients around it (TUI, `llmdeck serve`,
`llmdeck workers`, `llmdeck mcp`) over a Unix socket (0600, peer uid checked).

    from core.service import start_or_connect, RemoteRuntime
    client = await start_or_connect("tui")     # starts the service when none runs
    runtime = RemoteRuntime(client)            # the Runtime's async calls, forwarded

Modules, one idea each: framing (JSON lines, bounded), protocol (message shapes), codec
(dataclasses as tagged dicts, allowlisted), peer (who connected), outbox (a client's
queue, bounded in bytes, merging deltas when it lags), turns (replies that outlive their
client), dispatch (the call table), call_args (each call's argument schema), server (the socket side), process (the service itself),
launch (starting it detached), client, remote_runtime, control (`llmdeck service`),
http_face (`llmdeck serve` inside the service).

The face below loads what it names only when asked (PEP 562): `llmdeck --help` pays
nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.service.client import (
        ServiceCallError,
        ServiceClient,
        ServiceUnavailable,
        connect,
        run_call,
    )
    from core.service.launch import start_or_connect
    from core.service.loopback import Loopback
    from core.service.remote_runtime import RemoteRuntime, RemoteTurn, typed_here

__all__ = ["Loopback", "RemoteRuntime", "RemoteTurn", "ServiceCallError", "ServiceClient",
           "ServiceUnavailable", "connect", "downloads_main", "format_status",
           "pull_in_service", "pull_main", "run_call", "service_main",
           "service_mcp_main", "service_serve_main", "service_status", "service_workers_main",
           "start_or_connect", "status_line", "typed_here"]

_FROM = {
    "ServiceCallError": "core.service.client", "ServiceClient": "core.service.client",
    "ServiceUnavailable": "core.service.client", "connect": "core.service.client",
    "run_call": "core.service.client", "start_or_connect": "core.service.launch",
    "RemoteRuntime": "core.service.remote_runtime", "RemoteTurn": "core.service.remote_runtime",
    "typed_here": "core.service.remote_runtime",
    "service_status": "core.service.control", "format_status": "core.service.control",
    "status_line": "core.service.control", "Loopback": "core.service.loopback",
}
# `llmdeck pull` and `models downloads`: the service's download jobs (core.service.pull_cli)
_PULL = {"pull_main": "main", "downloads_main": "downloads_main", "pull_in_service": "in_service"}


def __getattr__(name: str) -> Any:
    import importlib

    if name == "service_main":  # `llmdeck service ...`
        return importlib.import_module("core.service.control").main
    if name == "service_serve_main":  # `llmdeck serve`: the HTTP face in the service
        return importlib.import_module("core.service.serve_face").main
    if name == "service_mcp_main":  # `llmdeck mcp`: the history shared with other agents
        return importlib.import_module("core.service.mcp_face").main
    if name == "service_workers_main":  # `llmdeck workers` while a service runs
        return importlib.import_module("core.service.control").workers_main
    if name in _PULL:
        return getattr(importlib.import_module("core.service.pull_cli"), _PULL[name])
    if name in _FROM:
        return getattr(importlib.import_module(_FROM[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
