"""What both streaming routes (chat and legacy completions) answer with: JSON bodies, and
SSE streams written chunk by chunk until the client goes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from core.events import Event

DIRECT_LIMIT = 64 * 1024  # bytes queued in the transport before writes wait for it to drain
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


async def write_stream(request: web.Request, timeout: float, out: bytearray,
                       encode: Callable[[list[Event]], bool], first: list[Event],
                       batches: AsyncIterator[list[Event]]) -> web.StreamResponse:
    """Answer `request` with an SSE stream of a generation's event batches.

    `encode` appends a batch's chunks to `out` (which may already hold the route's opening
    chunk) and says whether that batch ended the stream. Chunks go out as each batch is
    encoded; the end leaves with the last of them, in one write. A client that goes away
    ends it quietly (see Sink).
    """
    response = SseResponse(headers=SSE_HEADERS)
    chunked = request.version >= (1, 1)
    if chunked:
        response.enable_chunked_encoding()
    await response.prepare(request)
    sink = Sink(response, request.transport if chunked else None, timeout)
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
