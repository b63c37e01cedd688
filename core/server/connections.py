"""The server's open connections: a cap, timeouts, and JSON for malformed HTTP.

Every TCP connection costs a file descriptor. Left alone, clients that open connections
and send nothing (or send a header a byte a minute) exhaust them, after which asyncio
logs a traceback per failed accept. So:

- a connection must deliver a request head within `idle_timeout_s` of opening or of its
  previous response (aiohttp's keep-alive timer, which also covers a slow header), a body
  within `body_timeout_s`, and read streamed output within `write_timeout_s`;
- at most `max_connections` are open (never more than the process's descriptor limit
  allows); at the cap a new connection closes the oldest idle one, and when none is idle
  it gets a 503 and is closed, so the server keeps serving at the cap;
- HTTP that does not parse gets an OpenAI-shaped JSON error, and is not logged with a
  traceback (a port scanner would fill the log).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from core.server.wire import ApiError

log = logging.getLogger("llmdeck.serve")


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """Time and connection bounds of one server (defaults suit a desktop)."""

    max_connections: int = 512
    idle_timeout_s: float = 30.0  # no request head within this: closed
    body_timeout_s: float = 30.0  # a request body must arrive within this
    write_timeout_s: float = 60.0  # a streaming client must take each chunk within this
    load_wait_s: float = 120.0  # requests wait this long for a loading model, then 503
    stream_open_s: float = 0.5  # a stream with no first token yet opens (headers) after this
    keepalive_s: float = 5.0  # then a keep-alive event this often until the first token

    def connection_cap(self) -> int:
        """max_connections, lowered to what the descriptor limit leaves for the rest of the
        process (workers' pipes, the store, logs: 256 kept aside).

        The soft limit is first raised toward the hard one where it is short (macOS starts
        processes at 256), as servers commonly do; that needs no privilege.
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = self.max_connections + _RESERVED_FDS
        if soft != resource.RLIM_INFINITY and soft < want:
            target = want if hard == resource.RLIM_INFINITY else min(want, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return min(self.max_connections, max(8, soft - _RESERVED_FDS))


_RESERVED_FDS = 256


_REFUSED = ApiError(503, "The server has too many open connections; retry in a moment.",
                    code="too_many_connections").body()


class ConnectionGuard:
    """Protocol factory for loop.create_server: aiohttp's handlers, counted and capped."""

    def __init__(self, server: web.Server, limits: ServeLimits) -> None:
        self.server = server
        self.cap = limits.connection_cap()
        self.loop = asyncio.get_running_loop()
        self.open: dict[_Connection, None] = {}  # insertion order: oldest first
        self.evicted = 0  # idle connections closed to make room
        self.refused = 0  # connections turned away at the cap (all others busy)

    def __call__(self) -> _Connection:
        # Server._kwargs holds the runner's handler options (keepalive_timeout, ...);
        # aiohttp builds its own handlers from them the same way (Server.__call__).
        return _Connection(self, self.server, loop=self.loop, **self.server._kwargs)

    def opened(self, conn: _Connection) -> None:
        self.open[conn] = None
        if len(self.open) <= self.cap:
            return
        victim = next((c for c in self.open if c is not conn and not c.active), None)
        if victim is not None:
            self.evicted += 1
            del self.open[victim]  # closing now (its connection_lost comes a step later)
            victim.force_close()  # idle: no request on it, nothing lost
        else:
            self.refused += 1
            del self.open[conn]
            conn.refuse()

    def closed(self, conn: _Connection) -> None:
        self.open.pop(conn, None)


class _Connection(RequestHandler):
    """aiohttp's request handler, known to the guard, with JSON errors for bad HTTP."""

    def __init__(self, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.active = 0  # requests being handled now (set by busy_middleware)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)

    def refuse(self) -> None:
        body = json.dumps(_REFUSED).encode()
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                 b"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%b"
                                 % (len(body), body))
        self.force_close()  # the transport sends what it holds, then closes

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """Errors outside the app's middleware: HTTP that does not parse (400), a handler
        timing out (504), or a bug (500). JSON, and one log line at most."""
        if request.writer.output_size > 0:
            raise ConnectionError("The response was already started; cannot send an error.")
        if status >= 500:
            log.warning("serve: %s answering %s %s: %s", status, request.method, request.path,
                        type(exc).__name__ if exc else message)
            text = ("The server hit an internal error handling this request; retry it." if status == 500
                    else "The request took too long to handle.")
        else:
            text = f"The request is not valid HTTP: {message or exc or 'malformed'}."[:300]
        response = web.Response(text=json.dumps(ApiError(status, text).body()), status=status,
                                content_type="application/json")
        response.force_close()
        return response


@web.middleware
async def busy_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Marks the connection busy while a request is handled (busy ones are never evicted)."""
    conn = request.protocol
    if not isinstance(conn, _Connection):
        return await handler(request)
    conn.active += 1
    try:
        return await handler(request)
    finally:
        conn.active -= 1


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through a ConnectionGuard."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, limits: ServeLimits) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._limits = limits
        self.guard: ConnectionGuard | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self.guard = ConnectionGuard(server, self._limits)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.guard, self._host, self._port,
                                                reuse_address=True, backlog=128)
