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
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from aiohttp import web

from core import model_ids
from core.events import (
    Done,
    Error,
    Event,
    Logprobs,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from core.openai_wire import tool_call_body
from core.remote.backend import Backend, PoolBackend
from core.server import request_log
from core.server.collect import collect
from core.server.completions import CompletionsRoute
from core.server.connections import ServeLimits, busy_middleware
from core.server.dialect_routes import register as register_dialects
from core.server.dialects import generation
from core.server.embeddings import EMBEDDING_MODELS, MAX_INPUTS, EmbeddingService
from core.server.limits import (
    MAX_BODY_BYTES,
    check_numbers,
    check_shape,
    load_body,
    refuse_too_many_tools,
    too_large,
)
from core.server.local_models import Loaded, LocalModels, describe, keep_alive_of
from core.server.local_models import add_routes as add_model_routes
from core.server.sse import KEEPALIVE_COMMENT, EarlyStream, json_response, write_stream
from core.server.tool_schemas import prepare as prepare_tools
from core.server.wire import (
    ApiError,
    ChatCall,
    api_error_for,
    finish_for,
    parse_chat,
    usage_body,
)

if TYPE_CHECKING:
    from core.runtime import Runtime

log = logging.getLogger("llmdeck.serve")

DEFAULT_MAX_QUEUE = 256
_CONTENT = b'{"content":'
_REASONING = b'{"reasoning_content":'
_json_str = encode_basestring  # json.dumps(text, ensure_ascii=False) without building an encoder


def _role_chunk(head: str) -> bytes:
    """A chat stream's first chunk: the assistant's role, no text yet."""
    return (f'data: {head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
            '"logprobs":null,"finish_reason":null}]}\n\n').encode()


class ChatServer:
    """Routes and admission control for one Runtime."""

    def __init__(self, runtime: Runtime, *, api_key: str | None = None,
                 max_queue: int = DEFAULT_MAX_QUEUE, served_name: str | None = None,
                 embeddings: EmbeddingService | None = None,
                 limits: ServeLimits | None = None) -> None:
        self.runtime = runtime
        self.limits = limits or ServeLimits()
        self.api_key = api_key or None
        self.max_queue = max_queue
        self.served_name = served_name
        self.embeddings = embeddings or EmbeddingService()
        self._remote_backends: dict[str, Backend] = {}
        self.active = 0  # requests streaming now (for the worker pane)
        self._load_waiters = 0  # requests waiting for the model to finish loading
        self.local_models = LocalModels(self)  # every other local model, by name
        # one line per request (core.server.request_log), e.g. print; None: no lines
        self.request_log: Callable[[str], None] | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[request_log.middleware(self), busy_middleware,
                                           self._errors],
                              client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", CompletionsRoute(self).handle)
        app.router.add_get("/v1/models", self.models)
        add_model_routes(app, self.local_models)  # POST /v1/models/{id}/load, /unload
        app.router.add_post("/v1/embeddings", self.embed)
        app.router.add_get("/health", self.health)
        register_dialects(app, self)  # Anthropic Messages, Ollama, Responses, /metrics
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
            response = json_response(exc.body(), status=exc.status)
            if exc.status in (408, 413):  # the rest of the body is not wanted: close after this
                response.force_close()
            return response
        except web.HTTPRequestEntityTooLarge as exc:  # aiohttp's own read limit
            response = json_response(too_large(getattr(exc, "actual_size", None)).body(), status=413)
            response.force_close()
            return response
        except web.HTTPException as exc:  # unknown route, wrong method
            status = exc.status
            message = f"{request.method} {request.path} is not an endpoint of this server."
            if status == 405:
                message = f"{request.path} does not accept {request.method}."
            elif status != 404:
                message = exc.reason or message
            return json_response(ApiError(status, message).body(), status=status)
        except (asyncio.CancelledError, ConnectionError):
            raise  # the client went away: nobody to answer
        except Exception as exc:  # a bug: still JSON, and one line in the log (no request text)
            log.warning("serve: internal error on %s %s: %s", request.method, request.path,
                        type(exc).__name__)
            return json_response(ApiError(500, "The server hit an internal error handling this "
                                          f"request ({type(exc).__name__}); retry it.").body(),
                                 status=500)

    def _check_key(self, request: web.Request) -> None:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {self.api_key}"
        # aiohttp keeps undecodable header bytes as surrogates: encode them back, never raise
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                   expected.encode("utf-8", "surrogatepass")):
            raise ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>' with "
                           "the key this server was started with.", code="invalid_api_key")

    # -- models --------------------------------------------------------------------
    def local_name(self) -> str:
        """The id the app's model is listed and answered under: --served-name, else its
        catalog id (Ollama's `name:tag`, as every other local model), else its label.
        The display name still finds it (core.model_catalog reads names too)."""
        if self.served_name:
            return self.served_name
        entry = self.local_models.app_entry()
        return entry.id if entry is not None else self.runtime.model.label

    def model_id(self, backend: Backend, asked: str) -> str:
        """The id of the model behind `backend` (as /v1/models lists it), whatever name
        the request used; a remote's model keeps the name asked."""
        if backend is self.runtime.backend or (isinstance(backend, PoolBackend)
                                               and backend.key == self.runtime.model_key):
            return self.local_name()
        if not isinstance(backend, PoolBackend):
            return asked
        status = self.local_models.running().get(backend.key)
        return self.local_models.name_of(status) if status is not None else backend.key

    def _remote_names(self) -> dict[str, tuple[str, str]]:
        return {f"{r.name}/{m}": (r.name, m) for r in self.runtime.settings.remotes for m in r.models}

    async def _backend_for(self, model: str) -> Backend:
        """The backend serving `model`: 404 if unknown, 503 if the model failed; while the
        local model loads, the request waits for it (up to limits.load_wait_s)."""
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
        if not model_ids.same_id(model, self.local_name()):  # another local model: on request
            entry = await self.local_models.find(model)
            if entry is None:
                raise self._not_served(model)
            if not self.local_models.is_app_model(entry):
                return await self.local_models.backend(entry)
        state, error = self.model_health()
        if state == "failed" and rt.model.state == "failed" and not rt.pool.crash_failure(
                rt.model_key):  # a load that failed (a file since restored): tried again
            await self._wait_for_load()
            return rt.backend
        if state == "failed":
            why = "failed to load" if rt.model.state == "failed" else "is not available"
            raise ApiError(503, f"The model {why}: {error}", code="model_unavailable")
        if state == "loading" and rt.model.state != "ready":  # (a respawn: the pool waits for it)
            await self._wait_for_load()
        elif getattr(rt.backend, "asleep", False):  # a cluster stopped after its idle time:
            await self._wait_for_load()  # started again (core.cluster.on_demand)
        return rt.backend

    def _not_served(self, model: str) -> ApiError:
        return ApiError(404, f"The model {model[:200]!r} is not served here: no local model, "
                        f"alias or remote has that name. GET /v1/models lists what is (the "
                        f"app's model now: {self.local_name()!r}).", param="model",
                        code="model_not_found")

    def model_facts(self, backend: Backend) -> Loaded:
        """The context size, vision and load info of the model behind `backend`."""
        rt = self.runtime
        if isinstance(backend, PoolBackend) and backend.key != rt.model_key:
            facts = self.local_models.facts(backend.key)
            if facts is not None:
                return facts
            return Loaded(rt.settings.context_size, False, {})
        info = rt.model.info or {}
        return Loaded(rt.model.context_size, bool(info.get("vision")), dict(info))

    async def _wait_for_load(self) -> None:
        """Wait for the local model (starting its load if nothing has); 503 on failure or
        after limits.load_wait_s. Waiters count against the queue limit."""
        rt = self.runtime
        if self._load_waiters + rt.backend.queued() >= self.max_queue:
            raise ApiError(429, f"The queue is full ({self.max_queue} requests waiting for the "
                           "model to load); retry shortly.", code="queue_full")
        wait = self.limits.load_wait_s
        self._load_waiters += 1
        try:
            # ensure_model shields the load itself: a timeout here only stops waiting
            ok = await asyncio.wait_for(rt.ensure_model(), timeout=wait)
        except TimeoutError:
            raise ApiError(503, f"The model is still loading after {wait:.0f} s of waiting; retry "
                           "in a moment (GET /health says when it is ready).",
                           code="model_loading") from None
        finally:
            self._load_waiters -= 1
        if not ok:
            raise ApiError(503, f"The model failed to load: {rt.model.error}", code="model_unavailable")

    def model_health(self) -> tuple[str, str | None]:
        """("loading" | "ready" | "failed", why it failed): what a request would meet now.

        "failed" covers a load that failed and a model given up on after repeated crashes
        (the Runtime may still say "ready" then); a worker being respawned is "loading".
        """
        rt = self.runtime
        crashed = rt.pool.crash_failure(rt.model_key)
        if crashed:
            return "failed", crashed
        if rt.model.state == "failed":
            return "failed", rt.model.error
        if rt.model.state != "ready":
            return "loading", None
        if rt.backend.kind != "local" or rt.backend.ready():
            return "ready", None
        workers = [w.state for w in rt.pool.status() if w.model == rt.model.label]
        if any(state in ("loading", "crashed") for state in workers):
            return "loading", None  # respawning after a crash
        return "ready", None  # unloaded while idle: the next request loads it again

    async def models(self, request: web.Request) -> web.Response:
        """The app's model, every local model on disk by id (with which are loaded and
        their memory), the remotes and the embedding model."""
        now = int(time.time())
        data = []
        running = self.local_models.running()
        app_model = running.get(self.runtime.model_key)
        entries = await self.local_models.entries()  # first: local_name reads this listing
        if self.model_health()[0] != "failed":  # a request for it is served (or waits for the load)
            data.append({"id": self.local_name(), "object": "model", "created": now,
                         "owned_by": "llmdeck",
                         "name": self.runtime.model.name or self.runtime.model.label,
                         "loaded": app_model is not None,
                         **(describe(app_model) if app_model else {})})
        for entry in entries:
            if entry.id == self.local_name() or self.local_models.is_app_model(entry):
                continue  # the app's model: listed once, above
            status = self.local_models.running_at(entry.path)
            data.append({"id": entry.id, "object": "model", "created": int(entry.modified) or now,
                         "owned_by": "llmdeck", "name": entry.name, "format": entry.format,
                         "size_bytes": entry.size_bytes, "loaded": status is not None,
                         **(describe(status) if status else {})})
        data += [{"id": name, "object": "model", "created": now, "owned_by": f"remote:{ep}"}
                 for name, (ep, _) in self._remote_names().items()]
        data += [{"id": name, "object": "model", "created": now, "owned_by": "llmdeck-embeddings"}
                 for name in EMBEDDING_MODELS[:1]]
        return json_response({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        """200 when a chat request would be served now, 503 (same body) when not."""
        state, error = self.model_health()
        workers = [{"id": w.worker_id, "state": w.state, "restarts": w.restarts}
                   for w in self.runtime.pool.status()]
        body = {"status": state, "model": self.local_name(), "error": error, "workers": workers}
        return json_response(body, status=200 if state == "ready" else 503)

    # -- chat ------------------------------------------------------------------------
    async def _body(self, request: web.Request) -> Any:
        """The checked JSON body: size, time to arrive, encoding, nesting, text, numbers."""
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise too_large(request.content_length)  # refused before a byte of it is read
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                raw = await request.read()
        except TimeoutError:
            raise ApiError(408, f"The request body did not arrive within "
                           f"{self.limits.body_timeout_s:.0f} s.", code="request_timeout") from None
        body = load_body(raw)
        refuse_too_many_tools(body)  # a count, before anything looks at thousands of tools
        check_shape(body)
        check_numbers(body)
        await prepare_tools(body)  # their schemas, checked in a thread (core.server.tool_schemas)
        return body

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        keep = keep_alive_of(body)  # Ollama's keep_alive, taken here too
        call = parse_chat(body, self.runtime.settings.sampling)
        cache_key = body.get("prompt_cache_key")  # OpenAI's: the worker that holds the prefix
        if isinstance(cache_key, str) and cache_key and call.request.session_id is None:
            call = replace(call, request=replace(call.request, session_id=cache_key))
        # Admission (backend, images, prompt size, queue), metering and the close that
        # cancels a vanished client's request: the same for every dialect (dialects.py).
        head = early = None
        if call.stream:  # opened while a long prompt is prefilled (core.server.sse.EarlyStream)
            head = json.dumps({"id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                               "object": "chat.completion.chunk", "created": int(time.time()),
                               "model": call.model})[:-1]
            early = EarlyStream(request, self.limits.write_timeout_s, _role_chunk(head),
                                KEEPALIVE_COMMENT)
        async with generation(self, call, "/v1/chat/completions", keep, early) as (first, batches):
            if early is not None and head is not None:
                return await self._stream(request, call, first, batches, head, early)
            return await self._complete(call, first, batches)

    async def _complete(self, call: ChatCall, first: list[Event],
                        batches: AsyncIterator[list[Event]]) -> web.Response:
        got = await collect(first, batches)
        if got.error is not None:
            raise api_error_for(got.error)
        calls = [tool_call_body(c.id, c.name, c.arguments, c.raw) for c in got.calls]
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(got.text) if got.text or not calls else None}
        if got.reasoning:
            message["reasoning_content"] = "".join(got.reasoning)
        if calls:
            message["tool_calls"] = calls
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.model,
            "choices": [{"index": 0, "message": message,
                         "logprobs": {"content": got.logprobs} if call.request.sampling.logprobs else None,
                         "finish_reason": finish_for(got.finish, bool(calls))}],
            "usage": usage_body(got.usage),
        }
        return json_response(body)

    async def _stream(self, request: web.Request, call: ChatCall, first: list[Event],
                      batches: AsyncIterator[list[Event]], head: str,
                      early: EarlyStream) -> web.StreamResponse:
        """SSE chunks, one write per batch of queued events.

        A consumer that keeps up gets one chunk per token. One that fell behind (a busy
        box, a slow client) gets the backlog as one write in which consecutive text (or
        reasoning) deltas are merged into one chunk: OpenAI chunks may carry several
        tokens, clients concatenate. Nothing is reordered and nothing is merged across a
        tool call, usage, error or the end; usage counts tokens, not chunks.
        """
        prefix = (head + ',"choices":[{"index":0,"delta":').encode()
        tail = b',"logprobs":null,"finish_reason":null}]}\n\n'

        def chunk(delta: dict[str, Any]) -> bytes:
            return b"data: " + prefix + json.dumps(delta, ensure_ascii=False).encode() + tail

        out = bytearray()
        n_calls = 0
        streamed: dict[str, tuple[int, list[str]]] = {}  # call id -> index, arguments sent
        usage: Usage | None = None

        def encode(batch: list[Event]) -> bool:
            """Append the batch's chunks to `out`; True when it ended the stream."""
            nonlocal n_calls, usage
            i, n = 0, len(batch)
            while i < n:
                event = batch[i]
                i += 1
                kind = type(event)
                if kind is TextDelta or kind is ReasoningDelta:  # the hot path: no dict to encode
                    text = event.text  # type: ignore[union-attr]
                    if i < n and type(batch[i]) is kind:  # a backlog: merge the run
                        j = i
                        while j < n and type(batch[j]) is kind:
                            j += 1
                        text += "".join([e.text for e in batch[i:j]])  # type: ignore[union-attr]
                        i = j
                    out.extend(b"data: " + prefix + (_CONTENT if kind is TextDelta else _REASONING)
                               + _json_str(text).encode() + b"}" + tail)
                elif kind is ToolCallDelta:  # a call being written (core.parsing.argstream)
                    if event.name is not None:  # it opens: id, type, name, no arguments yet
                        streamed[event.id] = (n_calls, [])
                        out.extend(chunk({"tool_calls": [{"index": n_calls, "id": event.id,
                                          "type": "function", "function": {
                                              "name": event.name, "arguments": ""}}]}))
                        n_calls += 1
                    elif event.id in streamed:  # one chunk per decoded piece, even in a backlog
                        index, sent = streamed[event.id]
                        sent.append(event.arguments)
                        out.extend(chunk({"tool_calls": [{"index": index, "function": {
                            "arguments": event.arguments}}]}))
                elif isinstance(event, ToolCall):
                    body = tool_call_body(event.id, event.name, event.arguments, event.raw)
                    opened = streamed.pop(event.id, None)
                    if opened is None:  # not streamed (another format): the whole call at once
                        out.extend(chunk({"tool_calls": [{"index": n_calls, **body}]}))
                        n_calls += 1
                    elif not opened[1]:  # opened, but no argument text followed: send it all
                        out.extend(chunk({"tool_calls": [{"index": opened[0], "function": {
                            "arguments": body["function"]["arguments"]}}]}))
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Logprobs):  # a chunk of its own: no text is held for it
                    out.extend(b"data: " + prefix + b'{"content":""},"logprobs":{"content":'
                               + json.dumps(event.content, ensure_ascii=False).encode()
                               + b'},"finish_reason":null}]}\n\n')
                elif isinstance(event, Error):  # headers are sent: the error travels in the stream
                    out.extend(b"data: " + json.dumps(api_error_for(event).body()).encode() + b"\n\n")
                    return True
                elif isinstance(event, Done):
                    finish = finish_for(event.finish_reason, n_calls > 0)
                    out.extend(b"data: " + prefix + b'{},"logprobs":null,"finish_reason":"'
                               + finish.encode() + b'"}]}\n\n')
                    if call.include_usage:
                        out.extend(b"data: " + head.encode() + b',"choices":[],"usage":'
                                   + json.dumps(usage_body(usage)).encode() + b"}\n\n")
                    out.extend(b"data: [DONE]\n\n")
                    return True
            return False

        return await write_stream(request, self.limits.write_timeout_s, out, encode, first,
                                  batches, early)

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
        if len(texts) > MAX_INPUTS:
            raise ApiError(400, f"'input' has {len(texts):,} texts; at most {MAX_INPUTS} are "
                           "accepted per request.", param="input")
        vectors, tokens = await self.embeddings.encode(texts)
        data = []
        for i, vec in enumerate(vectors):
            value: Any = vec.tolist()
            if fmt == "base64":
                import base64

                value = base64.b64encode(vec.astype("<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        return json_response({"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
