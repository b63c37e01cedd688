"""The HTTP routes of `llmdeck serve`: OpenAI's /v1 API over the Runtime's backend.

Requests go through the same Backend the TUI uses (the Runtime's WorkerPool when the
model is local), so HTTP clients and the chat window are batched together by one
engine. The server keeps no conversations: the OpenAI API is stateless, and what other
programs send never reaches the store or the log.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from core.events import Done, Error, Event, ReasoningDelta, TextDelta, ToolCall, Usage
from core.remote.backend import Backend
from core.server.embeddings import EMBEDDING_MODELS, EmbeddingService
from core.server.wire import (
    ApiError,
    ChatCall,
    api_error_for,
    finish_for,
    parse_chat,
    tool_call_body,
    usage_body,
)

if TYPE_CHECKING:
    from core.runtime import Runtime

DEFAULT_MAX_QUEUE = 256
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no"}


class ChatServer:
    """Routes and admission control for one Runtime."""

    def __init__(self, runtime: Runtime, *, api_key: str | None = None,
                 max_queue: int = DEFAULT_MAX_QUEUE, served_name: str | None = None,
                 embeddings: EmbeddingService | None = None) -> None:
        self.runtime = runtime
        self.api_key = api_key or None
        self.max_queue = max_queue
        self.served_name = served_name
        self.embeddings = embeddings or EmbeddingService()
        self._remote_backends: dict[str, Backend] = {}
        self.active = 0  # requests streaming now (for the worker pane)
        self._loading: asyncio.Future[bool] | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/embeddings", self.embed)
        app.router.add_get("/health", self.health)
        return app

    async def close(self) -> None:
        for backend in self._remote_backends.values():
            await backend.close()
        self._remote_backends.clear()
        self.embeddings.close()

    # -- middleware ----------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if self.api_key and request.path.startswith("/v1/"):
                self._check_key(request)
            return await handler(request)
        except ApiError as exc:
            return _json(exc.body(), status=exc.status)
        except web.HTTPException as exc:  # unknown route, wrong method
            status = exc.status
            message = f"{request.method} {request.path} is not an endpoint of this server."
            if status == 405:
                message = f"{request.path} does not accept {request.method}."
            return _json(ApiError(status, message).body(), status=status)

    def _check_key(self, request: web.Request) -> None:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {self.api_key}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>' with "
                           "the key this server was started with.", code="invalid_api_key")

    # -- models --------------------------------------------------------------------
    def local_name(self) -> str:
        return self.served_name or self.runtime.model.label

    def _remote_names(self) -> dict[str, tuple[str, str]]:
        return {f"{r.name}/{m}": (r.name, m) for r in self.runtime.settings.remotes for m in r.models}

    def _backend_for(self, model: str) -> Backend:
        """The backend serving `model`; 503 while the local model loads, 404 if unknown."""
        remote = self._remote_names().get(model)
        if remote is not None:
            backend = self._remote_backends.get(model)
            if backend is None:
                from core.remote.client import RemoteBackend

                endpoint = self.runtime.settings.remote(remote[0])
                assert endpoint is not None
                backend = self._remote_backends[model] = RemoteBackend(endpoint, remote[1])
            return backend
        rt = self.runtime
        if rt.model.state != "ready" or not rt.backend.ready():
            if rt.model.state == "failed":
                raise ApiError(503, f"The model failed to load: {rt.model.error}",
                               code="model_unavailable")
            if rt.model.state == "idle" and (self._loading is None or self._loading.done()):
                self._loading = asyncio.ensure_future(rt.ensure_model())
            raise ApiError(503, "The model is still loading; try again in a moment.",
                           code="model_loading")
        if model != self.local_name():
            raise ApiError(404, f"The model {model!r} is not served here; GET /v1/models lists "
                           f"what is (now: {self.local_name()!r}).", param="model",
                           code="model_not_found")
        return rt.backend

    async def models(self, request: web.Request) -> web.Response:
        now = int(time.time())
        data = []
        if self.runtime.model.state == "ready":
            data.append({"id": self.local_name(), "object": "model", "created": now, "owned_by": "llmdeck"})
        data += [{"id": name, "object": "model", "created": now, "owned_by": f"remote:{ep}"}
                 for name, (ep, _) in self._remote_names().items()]
        data += [{"id": name, "object": "model", "created": now, "owned_by": "llmdeck-embeddings"}
                 for name in EMBEDDING_MODELS[:1]]
        return _json({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": self.runtime.model.state, "model": self.local_name()})

    # -- chat ------------------------------------------------------------------------
    async def _body(self, request: web.Request) -> Any:
        try:
            return await request.json(loads=json.loads)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "The request body is not valid JSON.") from None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        call = parse_chat(await self._body(request), self.runtime.settings.sampling)
        backend = self._backend_for(call.model)
        if backend.queued() >= self.max_queue:
            raise ApiError(429, f"The queue is full ({self.max_queue} requests waiting); retry shortly.",
                           code="queue_full")
        # Nothing awaits between the check above and the generator's first step, which
        # joins the pool's queue: the count the next request sees is exact.
        events = backend.generate(call.request)
        self.active += 1
        try:
            first = await anext(events)
            if isinstance(first, Error):
                raise api_error_for(first)
            if call.stream:
                return await self._stream(request, call, first, events)
            return await self._complete(call, first, events)
        finally:
            self.active -= 1
            await events.aclose()  # a vanished client cancels its request in the worker

    async def _complete(self, call: ChatCall, first: Event,
                        events: AsyncIterator[Event]) -> web.Response:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        usage: Usage | None = None
        finish = "stop"
        event: Event | None = first
        while event is not None:
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, ToolCall):
                calls.append(tool_call_body(event.id, event.name, event.arguments, event.raw))
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Error):
                raise api_error_for(event)
            elif isinstance(event, Done):
                finish = event.finish_reason
                break
            event = await anext(events, None)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish_for(finish, bool(calls))}],
            "usage": usage_body(usage),
        }
        return _json(body)

    async def _stream(self, request: web.Request, call: ChatCall, first: Event,
                      events: AsyncIterator[Event]) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        head = json.dumps({"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
                           "created": int(time.time()), "model": call.model})[:-1]
        prefix = (head + ',"choices":[{"index":0,"delta":').encode()
        tail = b',"logprobs":null,"finish_reason":null}]}\n\n'

        def chunk(delta: dict[str, Any]) -> bytes:
            return b"data: " + prefix + json.dumps(delta, ensure_ascii=False).encode() + tail

        def text_chunk(key: bytes, text: str) -> bytes:
            return b"data: " + prefix + key + json.dumps(text, ensure_ascii=False).encode() + b"}" + tail

        out = bytearray(chunk({"role": "assistant", "content": ""}))
        n_calls = 0
        usage: Usage | None = None
        event: Event | None = first
        while event is not None:
            if isinstance(event, TextDelta):  # the hot path: one per token, no dict to encode
                out += text_chunk(b'{"content":', event.text)
            elif isinstance(event, ReasoningDelta):
                out += text_chunk(b'{"reasoning_content":', event.text)
            elif isinstance(event, ToolCall):
                body = tool_call_body(event.id, event.name, event.arguments, event.raw)
                out += chunk({"tool_calls": [{"index": n_calls, **body}]})
                n_calls += 1
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Error):  # headers are sent: the error travels in the stream
                out += b"data: " + json.dumps(api_error_for(event).body()).encode() + b"\n\n"
                break
            elif isinstance(event, Done):
                finish = finish_for(event.finish_reason, n_calls > 0)
                out += (b"data: " + prefix + b'{},"logprobs":null,"finish_reason":"'
                        + finish.encode() + b'"}]}\n\n')
                if call.include_usage:
                    out += (b"data: " + head.encode() + b',"choices":[],"usage":'
                            + json.dumps(usage_body(usage)).encode() + b"}\n\n")
                out += b"data: [DONE]\n\n"
                break
            if out:
                if not await _send(response, bytes(out)):
                    return response
                out.clear()
            event = await anext(events, None)
        if out and await _send(response, bytes(out)):
            await response.write_eof()
        return response

    # -- embeddings ----------------------------------------------------------------------
    async def embed(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        model = body.get("model")
        if model not in EMBEDDING_MODELS:
            raise ApiError(404, f"The embedding model {model!r} is not served here; use "
                           f"{EMBEDDING_MODELS[0]!r}.", param="model", code="model_not_found")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ApiError(400, "'input' must be a string or a non-empty list of strings "
                           "(token arrays are not supported).", param="input")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise ApiError(400, "'encoding_format' must be 'float' or 'base64'.", param="encoding_format")
        vectors = await self.embeddings.encode(texts)
        data = []
        for i, vec in enumerate(vectors):
            value: Any = vec.tolist()
            if fmt == "base64":
                import base64

                value = base64.b64encode(vec.astype("<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(t.split()) for t in texts)  # approximate: words, not wordpieces
        return _json({"object": "list", "data": data, "model": model,
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def _send(response: web.StreamResponse, data: bytes) -> bool:
    """Write to a stream; False when the client has gone, so the handler ends quietly
    (its generator is then closed, which cancels the request in the worker)."""
    try:
        await response.write(data)
    except ConnectionError:  # reset, or "cannot write to closing transport"
        return False
    return True


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body, ensure_ascii=False), status=status,
                        content_type="application/json")
