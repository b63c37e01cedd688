"""The HTTP client for streamable-HTTP MCP servers, with every answer's size bounded.

The SDK reads a JSON answer whole (`response.aread()`), however large; its server-sent
events are capped per event (1 MiB by default, too small for a picture). Here both are
held to the stdio transport's bound, MAX_MESSAGE_BYTES: a transport wrapper counts each
answer's bytes as they stream and raises a StreamError past the cap, which the SDK turns
into an error answer for that request; the call's sentence says what happened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from core.tools.mcp.stdio import MAX_MESSAGE_BYTES

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
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def capped_client(headers: dict[str, str] | None, cap: int = MAX_MESSAGE_BYTES) -> httpx2.AsyncClient:
    """An AsyncClient as the SDK's create_mcp_http_client makes it, answers capped."""
    kwargs: dict[str, Any] = {"timeout": httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                              "transport": CappedTransport(cap)}
    if headers:
        kwargs["headers"] = headers
    return httpx2.AsyncClient(**kwargs)
