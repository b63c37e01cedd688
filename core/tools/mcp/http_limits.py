"""The HTTP client for streamable-HTTP MCP servers, with every answer's size bounded.

The SDK reads a JSON answer whole (`response.aread()`), however large; its server-sent
events are capped per event (1 MiB by default, too small for a picture). Here both are
held to the stdio transport's bound, MAX_MESSAGE_BYTES: a transport wrapper counts each
answer's bytes as they stream and raises a StreamError past the cap, which the SDK turns
into an error answer for that request; the call's sentence says what happened.

The answer to a listing (tools/list, prompts/list, resources/list) is read whole here
(within the cap), cut to MAX_LISTED entries and re-written in a worker thread, JSON or
event stream alike, so a server listing 10,000 tools never has them parsed on the loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import httpx2

from core.tools.mcp.stdio import MAX_LISTED, MAX_MESSAGE_BYTES

_LISTING = re.compile(rb'"method"\s*:\s*"(tools|prompts|resources)/list"')

TOO_LARGE = "its answer was larger than {mib} MiB and was dropped unread"
CONNECT_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 300.0  # a server may hold an event stream open between events


class AnswerTooLarge(httpx2.StreamError):
    """An HTTP answer past the cap (a StreamError, which the SDK answers the request with)."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, cap: int) -> None:
        self.inner = inner
        self.cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.cap:
                raise AnswerTooLarge(TOO_LARGE.format(mib=self.cap // (1024 * 1024)))
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, each answer's body counted against `cap` as it streams.
    An event stream counts per request too: a tool call's answer is one event."""

    def __init__(self, cap: int = MAX_MESSAGE_BYTES) -> None:
        self.cap = cap
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _CappedStream(response.stream, self.cap)  # type: ignore[arg-type]
        try:
            listing = _LISTING.search(request.content[:4096]) if request.method == "POST" else None
        except httpx2.RequestNotRead:
            listing = None
        if listing is None or response.status_code != 200 or \
                response.headers.get("content-encoding", "identity") not in ("identity", ""):
            return response
        body = bytearray()
        async for chunk in _CappedStream(response.stream, self.cap):  # type: ignore[arg-type]
            body += chunk
        await response.aclose()
        key = listing.group(1).decode()
        trimmed = await anyio.to_thread.run_sync(_trim_listing, bytes(body), key)
        headers = [(k, v) for k, v in response.headers.items()
                   if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")]
        return httpx2.Response(response.status_code, headers=headers, content=trimmed,
                               request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _trim_json(text: bytes | str, key: str) -> bytes | None:
    """A JSON-RPC answer with at most MAX_LISTED entries under result[key] (and no next
    cursor), re-written; None when it was within that (or is not such an answer)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    result = data.get("result") if isinstance(data, dict) else None
    if not (isinstance(result, dict) and isinstance(result.get(key), list)
            and len(result[key]) > MAX_LISTED):
        return None
    result[key] = result[key][:MAX_LISTED]
    result.pop("nextCursor", None)
    return json.dumps(data, separators=(",", ":")).encode()


def _trim_listing(body: bytes, key: str) -> bytes:
    """In a worker thread: a listing's answer (one JSON body, or an event stream whose
    `data:` lines carry it) with its entries cut to MAX_LISTED."""
    if body.lstrip().startswith(b"{"):
        return _trim_json(body, key) or body
    events = re.split(rb"(\r?\n\r?\n)", body)
    for i in range(0, len(events), 2):
        lines = events[i].splitlines()
        data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
        if len(data) > 64 * 1024 and (trimmed := _trim_json(data, key)) is not None:
            kept = [line for line in lines if not line.startswith(b"data:")]
            events[i] = b"\n".join([*kept, b"data: " + trimmed])
    return b"".join(events)


def capped_client(headers: dict[str, str] | None, cap: int = MAX_MESSAGE_BYTES) -> httpx2.AsyncClient:
    """An AsyncClient as the SDK's create_mcp_http_client makes it, answers capped."""
    kwargs: dict[str, Any] = {"timeout": httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                              "transport": CappedTransport(cap)}
    if headers:
        kwargs["headers"] = headers
    return httpx2.AsyncClient(**kwargs)
