"""RemoteBackend: a model served by any OpenAI-compatible endpoint, as core.events.

vLLM, the llama.cpp server, Ollama and another llmdeck all speak /v1/chat/completions
with server-sent events. This reads that stream and yields the events a local worker
would: content -> TextDelta, reasoning_content (or Ollama's `reasoning`) ->
ReasoningDelta, tool_calls deltas assembled per index -> ToolCall, usage -> Usage, error
answers -> Error with a code, and a connection lost mid-reply -> Error(WORKER_CRASHED)
so the Runtime keeps the partial reply (the remote's generator is gone, as a crashed
worker's would be).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from core import json_text
from core.config import RemoteEndpoint
from core.engines.base import GenerationRequest
from core.events import Done, Error, Event, ReasoningDelta, TextDelta, ToolCall, Usage
from core.openai_wire import error_event_for, request_body


@dataclass
class _ToolDraft:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class RemoteBackend:
    """Streams one model of one remote endpoint."""

    kind = "remote"

    def __init__(self, endpoint: RemoteEndpoint, model: str, *, connect_timeout_s: float = 10.0,
                 read_timeout_s: float = 300.0) -> None:
        self.endpoint = endpoint
        self.model = model
        self.base = endpoint.url.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._responses: dict[str, aiohttp.ClientResponse] = {}
        self._cancelled: set[str] = set()

    @property
    def where(self) -> str:
        return f"The remote {self.endpoint.name!r} ({self.base})"

    def _headers(self) -> dict[str, str]:
        key = self.endpoint.key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s,
                                            sock_read=self.read_timeout_s)
            self._session = aiohttp.ClientSession(
                timeout=timeout, headers=self._headers(),
                connector=aiohttp.TCPConnector(limit=0))
        return self._session

    def ready(self) -> bool:
        return True

    def queued(self) -> int:
        return 0

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "endpoint": self.endpoint.name, "url": self.base, "model": self.model}

    def cancel(self, request_id: str) -> None:
        """Stop reading; closing the response drops the connection, which stops the remote."""
        self._cancelled.add(request_id)
        response = self._responses.get(request_id)
        if response is not None:
            response.close()

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def list_models(self) -> list[str]:
        """The chat model ids the endpoint serves (GET /models)."""
        async with self._client().get(f"{self.base}/models") as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                raise RemoteError(error_event_for(response.status, body, self.where))
        # Another llmdeck marks its embedding model; a chat picker has no use for it.
        return [str(m.get("id")) for m in body.get("data", [])
                if isinstance(m, dict) and m.get("owned_by") != "llmdeck-embeddings"]

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        rid = request.request_id
        started = time.perf_counter()
        try:
            response = await self._client().post(
                f"{self.base}/chat/completions", json=request_body(request, self.model))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            yield Error("LOAD_FAILED", f"Could not reach {self.where}: {_reason(exc)}. Check that "
                        "it is running and that the URL in settings is right.")
            yield Done("error")
            return
        self._responses[rid] = response
        try:
            if response.status != 200:
                try:
                    body: Any = await response.json(content_type=None)
                except (ValueError, aiohttp.ClientError):
                    body = None
                yield error_event_for(response.status, body, self.where)
                yield Done("error")
                return
            async for event in self._read_stream(response, rid, started):
                yield event
        finally:
            self._responses.pop(rid, None)
            self._cancelled.discard(rid)
            response.release()

    async def _read_stream(self, response: aiohttp.ClientResponse, rid: str,
                           started: float) -> AsyncIterator[Event]:
        drafts: dict[int, _ToolDraft] = {}
        first: float | None = None
        pieces = 0
        finish: str | None = None
        usage: dict[str, Any] | None = None
        try:
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json_text.loads(data)
                if not isinstance(chunk, dict):
                    raise _NotAStream(f"a chunk that is {type(chunk).__name__}, not an object")
                if chunk.get("error"):
                    for event in self._flush_tools(drafts):
                        yield event
                    yield error_event_for(500, chunk, self.where)
                    yield Done("error")
                    return
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                for choice in _objects(chunk.get("choices")):
                    delta = choice.get("delta")
                    delta = delta if isinstance(delta, dict) else {}
                    reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
                    if reasoning:
                        first = first or time.perf_counter()
                        pieces += 1
                        yield ReasoningDelta(reasoning)
                    if content := _text(delta.get("content")):
                        first = first or time.perf_counter()
                        pieces += 1
                        yield TextDelta(content)
                    for tc in _objects(delta.get("tool_calls")):
                        first = first or time.perf_counter()
                        draft = drafts.setdefault(int(tc.get("index", len(drafts))), _ToolDraft())
                        fn = tc.get("function")
                        fn = fn if isinstance(fn, dict) else {}
                        draft.id = _text(tc.get("id")) or draft.id
                        draft.name = _text(fn.get("name")) or draft.name
                        if arguments := _text(fn.get("arguments")):
                            draft.arguments.append(arguments)
                    if _text(choice.get("finish_reason")):
                        finish = choice["finish_reason"]
        except (ValueError, TypeError) as exc:  # JSON that is not an OpenAI stream
            for event in self._flush_tools(drafts):
                yield event
            yield Error("WORKER_CRASHED", f"{self.where} sent something that is not an "
                        f"OpenAI-style stream ({exc}). The reply so far was kept; check that the "
                        "URL in settings points at an OpenAI-compatible API.")
            yield Done("error")
            return
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            for event in self._flush_tools(drafts):
                yield event
            if rid in self._cancelled:
                yield Done("cancelled")
                return
            yield Error("WORKER_CRASHED", f"The connection to {self.where} was lost mid-reply "
                        f"({_reason(exc)}). The reply so far was kept; send again to retry.")
            yield Done("error")
            return
        for event in self._flush_tools(drafts):
            yield event
        if rid in self._cancelled:
            yield Done("cancelled")
            return
        if finish is None:
            yield Error("WORKER_CRASHED", f"{self.where} ended the reply without finishing it "
                        "(the connection closed early). The reply so far was kept; send again to retry.")
            yield Done("error")
            return
        if usage is not None:
            yield _usage(usage, started, first, pieces)
        yield Done(finish if finish in ("stop", "length", "tool_calls") else "stop")  # type: ignore[arg-type]

    def _flush_tools(self, drafts: dict[int, _ToolDraft]) -> list[Event]:
        out: list[Event] = []
        for index in sorted(drafts):
            d = drafts[index]
            raw = "".join(d.arguments)
            try:
                args = json_text.loads(raw) if raw.strip() else {}
                if not isinstance(args, dict):
                    raise ValueError("arguments are not a JSON object")
                out.append(ToolCall(d.id or f"call_{index}", d.name, args))
            except ValueError as exc:
                out.append(ToolCall(d.id or f"call_{index}", d.name, {}, raw=raw,
                                    error=f"The tool arguments are not valid JSON: {exc}"))
        drafts.clear()
        return out


class RemoteError(Exception):
    """A remote answered with an error outside a generation (e.g. listing models)."""

    def __init__(self, event: Error) -> None:
        super().__init__(event.message)
        self.code = event.code
        self.message = event.message


def _usage(body: dict[str, Any], started: float, first: float | None, pieces: int) -> Usage:
    now = time.perf_counter()
    details = body.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    completion = _count(body.get("completion_tokens")) or pieces
    span = now - first if first else 0.0
    return Usage(
        prompt_tokens=_count(body.get("prompt_tokens")),
        cached_tokens=_count(details.get("cached_tokens")),
        completion_tokens=completion,
        ttft_ms=((first or now) - started) * 1000.0,
        decode_tps=(completion - 1) / span if span > 0 and completion > 1 else 0.0,
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _NotAStream(ValueError):
    """A remote's stream chunk that is JSON but not an OpenAI chunk."""


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list field (choices, tool_calls); anything else is skipped."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int:
    """A token count from a remote's usage; what is not a count reads as 0."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and 0 <= value < 2**53 else 0
