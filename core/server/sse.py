"""What both streaming routes (chat and legacy completions) answer with: JSON bodies, and
SSE streams written chunk by chunk until the client goes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiohttp import web

from core.events import Event, PromptRead

DIRECT_LIMIT = 64 * 1024  # bytes queued in the transport before writes wait for it to drain
KEEPALIVE_COMMENT = b": keep-alive\n\n"  # an SSE comment: clients skip it
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


class SseResponse(web.StreamResponse):
    """A stream whose headers leave with its first chunk: one write instead of two (the
    first events are already in hand when the response is prepared)."""

    _send_headers_immediately = False


class Sink:
    """Writes a stream's SSE bytes; False once the client has gone, so the handler ends
    quietly (its generator is then closed, which cancels the request in the worker).

    The first write goes through aiohttp, which sends the headers with it. After that,
    while the socket keeps up, a chunk is framed here and handed to the transport in one
    call: aiohttp's writer costs a few coroutine layers per write, and this runs once per
    token for every stream. A client that stops reading fills the transport's buffer,
    and writes go back through aiohttp, which waits for it to drain.
    """

    __slots__ = ("response", "transport", "started", "timeout")

    def __init__(self, response: web.StreamResponse, transport: asyncio.Transport | None,
                 timeout: float = 60.0) -> None:
        self.response = response
        self.transport = transport  # None: not HTTP/1.1 chunked, always write through aiohttp
        self.started = False
        self.timeout = timeout  # a client that takes nothing for this long has gone

    async def send(self, data: bytearray) -> bool:
        transport = self.transport
        if self.started and transport is not None and transport.get_write_buffer_size() < DIRECT_LIMIT:
            if transport.is_closing():
                return False
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # one HTTP/1.1 chunk
            return True
        try:
            async with asyncio.timeout(self.timeout):
                await self.response.write(bytes(data))
        except (ConnectionError, TimeoutError):  # reset, closing transport, or stopped reading
            if transport is not None:
                transport.abort()
            return False
        self.started = True
        return True


class EarlyStream:
    """A stream that may open before the model's first token.

    A long prompt is prefilled before any token comes: minutes on a small machine for an
    agent's 28,000-token prompt. A client that hears nothing for that long (Claude Code's
    idle watchdog) drops the connection and sends it all again. So while the first batch
    is awaited (core.server.dialects.generation), the headers and the route's `opening`
    bytes are sent after a short grace, then `keepalive` bytes every few seconds; a write
    that fails means the client went, and the request is cancelled. Errors that come
    within the grace still get their HTTP status.

    `opening` may be a function, called when it is sent: Anthropic's first event carries
    the prompt's token count, which `prompt_read` holds once the worker has tokenized the
    prompt (core.server.dialects records it). With `hold_opening`, a stream that opens
    before then sends keep-alives alone, and the opening when the count comes (or with
    the first content, whichever is first): a request queued behind another, or waiting
    for a load, still gets the real count.
    """

    def __init__(self, request: web.Request, timeout: float, opening: bytes | Callable[[], bytes],
                 keepalive: bytes,
                 headers: Mapping[str, str] | None = None,
                 content_type: str = "text/event-stream", hold_opening: bool = False) -> None:
        self.request = request
        self.timeout = timeout
        self._opening = opening
        self.prompt_read: PromptRead | None = None
        self.hold_opening = hold_opening
        self.opening_sent = False
        self.keepalive = keepalive
        self.headers = {**SSE_HEADERS, "Content-Type": content_type, **(headers or {})}
        self.response: web.StreamResponse | None = None
        self.sink: Sink | None = None

    @property
    def opening(self) -> bytes:
        return self._opening() if callable(self._opening) else self._opening

    @property
    def opened(self) -> bool:
        return self.response is not None

    async def prepare(self) -> tuple[web.StreamResponse, Sink]:
        """The response, its headers sent (once)."""
        if self.response is None or self.sink is None:
            response = SseResponse(headers=self.headers)
            chunked = self.request.version >= (1, 1)
            if chunked:
                response.enable_chunked_encoding()
            await response.prepare(self.request)
            self.response = response
            self.sink = Sink(response, self.request.transport if chunked else None, self.timeout)
        return self.response, self.sink

    def take_opening(self) -> bytes:
        """The opening bytes, once (b"" after)."""
        if self.opening_sent:
            return b""
        self.opening_sent = True
        return self.opening

    async def open(self) -> bool:
        """Headers and the opening bytes (keep-alive bytes while the opening is held);
        False when the client has gone."""
        _, sink = await self.prepare()
        held = self.hold_opening and self.prompt_read is None
        return await sink.send(bytearray((b"" if held else self.take_opening()) or self.keepalive))

    async def send_opening(self) -> bool:
        """The held opening, now that its count has come (an opened stream only)."""
        if self.sink is None or self.opening_sent:
            return True
        return await self.sink.send(bytearray(self.take_opening()))

    async def ping(self) -> bool:
        assert self.sink is not None
        return await self.sink.send(bytearray(self.keepalive))


async def write_stream(request: web.Request, timeout: float, out: bytearray,
                       encode: Callable[[list[Event]], bool], first: list[Event],
                       batches: AsyncIterator[list[Event]],
                       early: EarlyStream | None = None) -> web.StreamResponse:
    """Answer `request` with an SSE stream of a generation's event batches.

    `encode` appends a batch's chunks to `out` and says whether that batch ended the
    stream; the route's opening chunk is `early.opening` (sent already when the stream
    opened before the first token), or what `out` holds. Chunks go out as each batch is
    encoded; the end leaves with the last of them, in one write. A client that goes away
    ends it quietly (see Sink).
    """
    if early is None:
        early = EarlyStream(request, timeout, b"", b"")
    if not early.opening_sent:
        out[:0] = early.take_opening()
    response, sink = await early.prepare()
    batch: list[Event] | None = first
    while batch is not None and not encode(batch):
        if out:
            if not await sink.send(out):
                return response
            out.clear()
        batch = await anext(batches, None)
    try:
        async with asyncio.timeout(timeout):
            await response.write_eof(bytes(out))
    except (ConnectionError, TimeoutError):
        pass
    return response


def json_response(body: Any, status: int = 200) -> web.Response:
    try:
        data = json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate echoed from a request or a model: escaped
        data = json.dumps(body).encode()
    return web.Response(body=data, status=status, content_type="application/json")
