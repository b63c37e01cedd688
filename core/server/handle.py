"""ServerHandle: start and stop the OpenAI-compatible server on a running Runtime.

The TUI toggles it from the worker pane (same loop, same WorkerPool, so its chat and
HTTP clients are batched together); `llmdeck serve` uses it headless. Binding beyond
loopback without an API key is refused: the server would hand the machine's model to
anyone on the network.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

from aiohttp import web

from core.server.app import DEFAULT_MAX_QUEUE, ChatServer
from core.server.connections import ConnectionGuard, GuardedSite, ServeLimits
from core.server.embeddings import EmbeddingService

if TYPE_CHECKING:
    from core.runtime import Runtime

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


class ServeError(Exception):
    """The server cannot start as asked; `message` says what to change."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServerHandle:
    """A running server; `url` is the base URL clients pass as base_url."""

    def __init__(self, server: ChatServer, runner: web.AppRunner, host: str, port: int,
                 guard: ConnectionGuard | None = None) -> None:
        self.server = server
        self.guard = guard  # open connections, evictions and refusals at the cap
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._runner.server is not None

    @property
    def active_requests(self) -> int:
        return self.server.active

    @classmethod
    async def start(cls, runtime: Runtime, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                    api_key: str | None = None, max_queue: int = DEFAULT_MAX_QUEUE,
                    served_name: str | None = None,
                    embeddings: EmbeddingService | None = None,
                    limits: ServeLimits | None = None) -> ServerHandle:
        """Bind and serve on the running loop; port 0 picks a free port."""
        if not is_loopback(host) and not api_key:
            raise ServeError("BAD_REQUEST", f"Refusing to serve on {host} without an API key: anyone "
                             "on the network could use this machine's model. Pass --api-key (or set "
                             "LLMDECK_API_KEY), or bind 127.0.0.1.")
        limits = limits or ServeLimits()
        server = ChatServer(runtime, api_key=api_key, max_queue=max_queue,
                            served_name=served_name, embeddings=embeddings, limits=limits)
        # Streams still open at stop get 2 s to finish, then are cut: switching the server
        # off in the TUI must not wait on a client that reads slowly. A client that hangs
        # up cancels its handler (and so its generation) at once, streaming or not; an idle
        # connection is closed after idle_timeout_s (aiohttp's keep-alive timer runs from
        # the connection's start too, so a header sent a byte at a time is cut as well).
        runner = web.AppRunner(server.app(), access_log=None, handle_signals=False,
                               shutdown_timeout=2.0, handler_cancellation=True,
                               keepalive_timeout=limits.idle_timeout_s,
                               lingering_time=2.0)  # reading a refused body's rest: 2 s at most
        await runner.setup()
        site = GuardedSite(runner, host, port, limits)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ServeError("BAD_REQUEST", f"Could not listen on {host}:{port}: {exc.strerror or exc}. "
                             "Pick another --port, or stop what is using it.") from None
        bound = port
        for sock in getattr(site._server, "sockets", None) or ():  # the real port when 0 was asked
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                bound = sock.getsockname()[1]
                break
        return cls(server, runner, host, bound, site.guard)

    async def stop(self) -> None:
        """Stop listening, end open streams, and stop the embedding process."""
        await self._runner.cleanup()
        await self.server.close()
