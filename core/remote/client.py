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

import json
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
from core.remote import reading


@dataclass
class _ToolDraft:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    size: int = 0
    refused: str = ""  # why the call will not run: cut or too long


class RemoteBackend:
    """Streams one model of one remote endpoint, every read bounded (core.remote.reading)."""

    kind = "remote"

    def __init__(self, endpoint: RemoteEndpoint, model: str, *, connect_timeout_s: float = 10.0,
                 read_timeout_s: float = 300.0, stall_timeout_s: float = 120.0) -> None:
        self.endpoint = endpoint
        self.model = model
        self.base = endpoint.url.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        # Until the first byte: a remote may prefill a long prompt for minutes.
        self.read_timeout_s = read_timeout_s
        self.stall_timeout_s = min(stall_timeout_s, read_timeout_s)
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
            # Reads are timed by core.remote.reading (first byte, stall, whole reply); aiohttp
            # times only the connect, so a connect timeout is told apart from the others.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s,
                                            sock_read=None)
            self._session = aiohttp.ClientSession(
                timeout=timeout, headers=self._headers(),
                connector=aiohttp.TCPConnector(limit=0))
        return self._session

    def _deadlines(self, reply_s: float) -> reading.Deadlines:
        return reading.Deadlines(self.connect_timeout_s, self.read_timeout_s,
                                 self.stall_timeout_s, reply_s)

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

    async def _post_or_get(self, method: str, path: str, deadlines: reading.Deadlines,
                           **kwargs: Any) -> aiohttp.ClientResponse:
        """Send a request and wait for the answer's headers within connect + first byte;
        a timeout says which of the two ran out."""
        call = self._client().request(method, f"{self.base}{path}", **kwargs)
        try:
            return await reading.within(call, self.connect_timeout_s + self.read_timeout_s,
                                        kind="first-byte", deadlines=deadlines,
                                        shown=self.read_timeout_s)
        except aiohttp.ServerTimeoutError:  # only the connect is timed by aiohttp itself
            raise reading.RemoteReadError(reading.timeout_reason("connect", self.connect_timeout_s),
                                          kind="connect") from None

    async def list_models(self) -> list[str]:
        """The chat model ids the endpoint serves (GET /models), read within bounds."""
        deadlines = self._deadlines(self.connect_timeout_s + 2 * self.read_timeout_s)
        try:
            response = await self._post_or_get("GET", "/models", deadlines)
            async with response:
                raw = await reading.body(response.content, deadlines)
                status = response.status
        except reading.RemoteReadError as exc:
            raise RemoteError(Error("TIMEOUT" if exc.kind != "size" else "LOAD_FAILED",
                                    f"{self.where} {exc.reason}.")) from None
        try:
            body = json_text.loads(reading.text(raw))
        except ValueError:
            body = None
        if status != 200:
            raise RemoteError(_clipped(error_event_for(status, body, self.where)))
        if not isinstance(body, dict):
            raise RemoteError(Error("LOAD_FAILED", f"{self.where} answered the model list with "
                                    "something that is not an OpenAI-style list; check its URL."))
        # Another llmdeck marks its embedding model; a chat picker has no use for it.
        return [reading.clipped(str(m.get("id")), 200) for m in _objects(body.get("data"))
                if m.get("owned_by") != "llmdeck-embeddings"]

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        rid = request.request_id
        started = time.perf_counter()
        bounds = reading.ReplyBounds.for_max_tokens(request.sampling.max_tokens)
        deadlines = self._deadlines(bounds.seconds)
        try:
            response = await self._post_or_get(
                "POST", "/chat/completions", deadlines, json=request_body(request, self.model))
        except reading.RemoteReadError as exc:
            yield Error("TIMEOUT", f"{self.where} {exc.reason}. {CHECK_ENDPOINT}")
            yield Done("error")
            return
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            yield Error("LOAD_FAILED", f"Could not reach {self.where}: {_reason(exc)}. Check that "
                        "it is running and that the URL in settings is right.")
            yield Done("error")
            return
        self._responses[rid] = response
        try:
            if response.status != 200:
                yield await self._error_answer(response, deadlines)
                yield Done("error")
                return
            kind = response.content_type or ""
            if kind == "text/html":
                yield Error("WORKER_CRASHED", f"{self.where} answered with a web page (text/html), "
                            "not an OpenAI-style stream; check that the URL in settings points at "
                            "an OpenAI-compatible API (not a login page or a proxy's).")
                yield Done("error")
                return
            reply = _Reply(self, rid, started, bounds)
            source = (self._whole_body(response, deadlines, reply) if kind == "application/json"
                      else self._read_stream(response, deadlines, reply))
            async for event in source:
                yield event
        finally:
            self._responses.pop(rid, None)
            self._cancelled.discard(rid)
            if response.content.at_eof():
                response.release()  # read to its end: the connection can serve the next
            else:
                response.close()  # cut, cancelled or refused: drop it, which stops the remote

    async def _error_answer(self, response: aiohttp.ClientResponse,
                            deadlines: reading.Deadlines) -> Error:
        """The Error for a non-200 answer, its body read within MAX_BODY_BYTES."""
        try:
            raw = await reading.body(response.content, deadlines)
        except reading.RemoteReadError as exc:
            event = error_event_for(response.status, None, self.where)
            return Error(event.code, f"{event.message} Its error body {exc.reason}.")
        except (aiohttp.ClientError, OSError):
            raw = b""
        try:
            body: Any = json_text.loads(reading.text(raw))
        except ValueError:
            body = None
        return _clipped(error_event_for(response.status, body, self.where))

    async def _whole_body(self, response: aiohttp.ClientResponse, deadlines: reading.Deadlines,
                          reply: _Reply) -> AsyncIterator[Event]:
        """A remote that answered with one JSON completion instead of a stream (it ignored
        stream=true): read within MAX_BODY_BYTES and turned into the same events."""
        try:
            raw = await reading.body(response.content, deadlines)
            chunk = json_text.loads(reading.text(raw))
            if not isinstance(chunk, dict):
                raise _NotAStream(f"an answer that is {type(chunk).__name__}, not an object")
            if chunk.get("error"):
                yield _clipped(error_event_for(500, chunk, self.where))
                yield Done("error")
                return
            for choice in _objects(chunk.get("choices")):
                message = choice.get("message")
                choice = {**choice, "delta": message if isinstance(message, dict) else {}}
                for event in reply.choice(choice, whole=True):
                    yield event
                if reply.cut:
                    break
            reply.take_usage(chunk)
        except (reading.RemoteReadError, ValueError, TypeError, TimeoutError,
                aiohttp.ClientError, OSError) as exc:
            for event in _ended_by(reply, exc):
                yield event
            return
        for event in reply.end():
            yield event

    async def _read_stream(self, response: aiohttp.ClientResponse, deadlines: reading.Deadlines,
                           reply: _Reply) -> AsyncIterator[Event]:
        budget = reading.ByteBudget()
        try:
            async for raw in reading.lines(response.content, deadlines, budget):
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json_text.loads(reading.text(data))
                if not isinstance(chunk, dict):
                    raise _NotAStream(f"a chunk that is {type(chunk).__name__}, not an object")
                if chunk.get("error"):
                    for event in reply.flush_tools():
                        yield event
                    yield _clipped(error_event_for(500, chunk, self.where))
                    yield Done("error")
                    return
                reply.take_usage(chunk)
                for choice in _objects(chunk.get("choices")):
                    for event in reply.choice(choice):
                        yield event
                if reply.cut:  # past the client's max_tokens: stop the remote, keep the text
                    response.close()
                    break
        except (reading.RemoteReadError, ValueError, TypeError, TimeoutError,
                aiohttp.ClientError, OSError) as exc:
            for event in _ended_by(reply, exc):
                yield event
            return
        for event in reply.end():
            yield event



def _ended_by(reply: _Reply, exc: BaseException) -> list[Event]:
    """The events that end a reply a read broke off: a bound it crossed, a body that is not
    an OpenAI stream, or a connection lost: the same three endings for both readers."""
    if isinstance(exc, reading.RemoteReadError):
        return reply.broken(exc)
    if isinstance(exc, (ValueError, TypeError)):
        return reply.garbled(exc)
    return reply.lost(exc)

# What a person can do when a remote fails them: its own advice, not a local worker's.
CHECK_ENDPOINT = ("Check that the remote is running and reachable (its URL is in settings, "
                  "[[remotes]]), then send again to retry.")


class _Reply:
    """One reply being read: its tool-call drafts, its counts against ReplyBounds, and
    the events that end it however it ends."""

    def __init__(self, backend: RemoteBackend, rid: str, started: float,
                 bounds: reading.ReplyBounds) -> None:
        self.backend = backend
        self.rid = rid
        self.started = started
        self.bounds = bounds
        self.drafts: dict[int, _ToolDraft] = {}
        self.first: float | None = None
        self.pieces = 0
        self.chars = 0
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.cut = False

    @property
    def where(self) -> str:
        return self.backend.where

    def _count(self, piece: str) -> str:
        """Count one piece of output; past the bounds the reply is cut (the piece shortened
        to what fits), as max_tokens would have cut it."""
        self.first = self.first or time.perf_counter()
        self.pieces += 1
        if self.pieces > self.bounds.pieces:
            self.cut = True
            return ""
        room = self.bounds.chars - self.chars
        if len(piece) >= room:
            self.cut = True
            piece = piece[:max(room, 0)]
        self.chars += len(piece)
        return piece

    def choice(self, choice: dict[str, Any], *, whole: bool = False) -> list[Event]:
        out: list[Event] = []
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
        if reasoning and not self.cut and (reasoning := self._count(reasoning)):
            out.append(ReasoningDelta(reasoning))
        content = _text(delta.get("content"))
        if content and not self.cut and (content := self._count(content)):
            out.append(TextDelta(content))
        for index, tc in enumerate(_objects(delta.get("tool_calls"))):
            if self.cut:
                break
            self._tool_piece(tc, index if whole else None)
        if _text(choice.get("finish_reason")):
            self.finish = choice["finish_reason"]
        return out

    def _tool_piece(self, tc: dict[str, Any], whole_index: int | None) -> None:
        position = tc.get("index", whole_index if whole_index is not None else len(self.drafts))
        if not isinstance(position, int) or isinstance(position, bool):
            raise _NotAStream(f"a tool call index that is {type(position).__name__}")
        if position not in self.drafts and len(self.drafts) >= reading.MAX_TOOL_CALLS:
            raise _NotAStream(f"more than {reading.MAX_TOOL_CALLS} tool calls in one reply")
        draft = self.drafts.setdefault(position, _ToolDraft())
        fn = tc.get("function")
        fn = fn if isinstance(fn, dict) else {}
        draft.id = reading.clipped(_text(tc.get("id")), 200) or draft.id
        draft.name = reading.clipped(_text(fn.get("name")), 200) or draft.name
        arguments = fn.get("arguments")
        if isinstance(arguments, dict):  # a non-streamed answer may give the object itself
            arguments = json.dumps(arguments)
        if isinstance(arguments, str) and arguments and not draft.refused:
            counted = self._count(arguments)
            if len(counted) < len(arguments):
                draft.refused = "was cut at the reply's length limit (max_tokens) before its arguments ended"
            elif draft.size + len(arguments) > reading.MAX_TOOL_ARGUMENT_CHARS:
                draft.refused = f"ran past {reading.MAX_TOOL_ARGUMENT_CHARS:,} characters of arguments"
            else:
                draft.arguments.append(arguments)
                draft.size += len(arguments)

    def take_usage(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]

    def flush_tools(self) -> list[Event]:
        out: list[Event] = []
        for index in sorted(self.drafts):
            d = self.drafts[index]
            call_id = d.id or f"call_{index}"
            raw = "".join(d.arguments)
            if d.refused:
                out.append(ToolCall(call_id, d.name, {}, raw=raw[:4096],
                                    error=f"The tool call {d.refused}; it was not run."))
                continue
            try:
                args = json_text.loads(raw) if raw.strip() else {}
                if not isinstance(args, dict):
                    raise ValueError("arguments are not a JSON object")
                out.append(ToolCall(call_id, d.name, args))
            except ValueError as exc:
                out.append(ToolCall(call_id, d.name, {}, raw=raw,
                                    error=f"The tool arguments are not valid JSON: {exc}"))
        self.drafts.clear()
        return out

    def _ended(self, *events: Event) -> list[Event]:
        out = self.flush_tools()
        if self.rid in self.backend._cancelled:
            return [*out, Done("cancelled")]
        return [*out, *events]

    def broken(self, exc: reading.RemoteReadError) -> list[Event]:
        """A bound hit mid-answer: the text so far is kept, the sentence says which bound."""
        code = "TIMEOUT" if exc.kind in ("first-byte", "stall", "time", "connect") else "WORKER_CRASHED"
        return self._ended(Error(code, f"{self.where} {exc.reason}. The reply so far was kept. "
                                 f"{CHECK_ENDPOINT}"), Done("error"))

    def garbled(self, exc: Exception) -> list[Event]:
        return self._ended(Error("WORKER_CRASHED", (
            f"{self.where} sent something that is not an OpenAI-style stream "
            f"({reading.clipped(str(exc), 300)}). The reply so far was kept; check that the URL in "
            "settings points at an OpenAI-compatible API.")), Done("error"))

    def lost(self, exc: BaseException) -> list[Event]:
        return self._ended(Error("WORKER_CRASHED", (
            f"The connection to {self.where} was lost mid-reply ({_reason(exc)}). The reply so "
            f"far was kept. {CHECK_ENDPOINT}")), Done("error"))

    def end(self) -> list[Event]:
        """The reply's end after its stream ended (or was cut at the bounds)."""
        if self.cut:
            return self._ended(Done("length"))
        if self.finish is None:
            return self._ended(Error("WORKER_CRASHED", (
                f"{self.where} ended the reply without finishing it (the connection closed "
                f"early). The reply so far was kept. {CHECK_ENDPOINT}")), Done("error"))
        tail: list[Event] = []
        if self.usage is not None:
            tail.append(_usage(self.usage, self.started, self.first, self.pieces))
        finish = self.finish if self.finish in ("stop", "length", "tool_calls") else "stop"
        return self._ended(*tail, Done(finish))  # type: ignore[arg-type]


def _clipped(event: Error) -> Error:
    """A remote's error with its own words shortened (a 10 MB message is still one line)."""
    return Error(event.code, reading.clipped(event.message))


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
