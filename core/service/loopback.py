"""The engine service inside the app's own process, behind the same protocol (issue 42).

`llmdeck --in-process` (and the pilot tests' apps) used to call a Runtime directly: a
second code path, where users ran the service's client. Here the same ServiceServer
answers the same ServiceClient over a socket pair, so every call, answer, push and error
is framed, encoded and decoded exactly as over the home's socket; only the process
boundary is gone. Nobody else can reach it: the pair has no path.

    loop = await Loopback.open(runtime)          # runtime started by the caller
    remote = RemoteRuntime(loop.client)
    ...
    await loop.close()                           # the runtime stays the caller's to close
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

from core.service.client import ServiceClient, greet
from core.service.downloads import close_for, open_for_server
from core.service.notices import forward_memory
from core.service.server import ServiceServer

SAME_PROCESS = "same process"  # the loopback's hello version: its client is this code


class _Control:
    """ServiceControl for a service that lives as long as its one app."""

    def __init__(self, server: ServiceServer) -> None:
        self.server = server
        self.started = time.time()

    def status(self) -> dict[str, Any]:
        runtime = self.server.runtime
        try:
            models = sorted({s.model for s in runtime.pool.status() if s.model})
        except Exception:  # noqa: BLE001 - a status line never fails the call
            models = []
        return {"pid": os.getpid(), "started_at": self.started,
                "uptime_s": round(time.time() - self.started, 1),
                "clients": len(self.server.sessions), "turns": self.server.hub.live_count(),
                "models": models, "model_state": getattr(runtime.model, "state", "?"),
                "rss_bytes": 0, "workers_rss_bytes": 0, "socket": "(in this process)",
                "idle_exit_s": None, "http": None}

    def request_stop(self, reason: str, restart: bool = False) -> None:
        """Quitting the app stops it; a client cannot."""

    async def open_http(self, args: dict[str, Any], owner: Any = None) -> dict[str, Any]:
        raise LookupError("An in-process app serves no HTTP API; run `llmdeck serve`.")

    async def close_http(self) -> bool:
        return False

    def sticky_notices(self) -> list[dict[str, Any]]:
        return list(self.server.notices.sticky)

    def session_gone(self, session: Any) -> None:
        pass


class Loopback:
    """A started runtime's service, and one client connected to it through a pair."""

    def __init__(self, server: ServiceServer, client: ServiceClient,
                 serving: asyncio.Future[None]) -> None:
        self.server = server
        self.client = client
        self._serving = serving
        self._forward = runtime_listener(server)
        server.runtime.listeners.append(self._forward)
        self._memory = forward_memory(server.runtime, server.broadcast)

    @classmethod
    async def open(cls, runtime: Any, client: str = "tui") -> Loopback:
        # The client is this very code: no version to look up (an app's start would pay
        # importlib.metadata's ~20 ms for a hello nobody compares).
        server = ServiceServer(runtime, Path(os.devnull), None,  # type: ignore[arg-type]
                               version=SAME_PROCESS)
        server.control = _Control(server)
        if runtime.store_notice:  # a damaged database moved aside: told as the service tells
            server.notices.say("store", runtime.store_notice, title="History",
                               severity="warning", sticky=True)
        open_for_server(runtime, server)  # `d` and `llmdeck pull`'s jobs, as a service's
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        reader, writer = await asyncio.open_unix_connection(sock=theirs)
        serving = asyncio.ensure_future(server.serve_connection(reader, writer))
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        return cls(server, await greet(reader, writer, client, "this process"), serving)

    async def close(self) -> None:
        """The client leaves, live replies stop and are stored (the runtime stays open)."""
        if self._forward in self.server.runtime.listeners:
            self.server.runtime.listeners.remove(self._forward)
        if self._memory in self.server.runtime.memory_listeners:
            self.server.runtime.memory_listeners.remove(self._memory)
        await self.client.close()
        await self.server.hub.close()
        await close_for(self.server.runtime)  # a stop, not a cancel: the next run resumes
        for session in list(self.server.sessions):
            session.close()
        self._serving.cancel()


def runtime_listener(server: ServiceServer) -> Any:
    """The model's state to the "model" subscribers, as core.service.process does."""
    from core.service import codec

    def forward(state: Any) -> None:
        try:
            data = codec.encode(state)
        except codec.CodecError:
            return
        server.broadcast({"event": "model", "data": data}, "model")

    return forward
