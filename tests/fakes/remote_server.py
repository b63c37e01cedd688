"""A loopback OpenAI-compatible remote for the tests: honest or hostile by model name.

A real aiohttp server (POST /v1/chat/completions, GET /v1/models) that a RemoteBackend,
the Runtime or a real `llmdeck serve` talks to as it would to vLLM. The model named in a
request picks how it answers:

  good             a short streamed reply (or one JSON completion when stream is false)
  endless-stream   valid chunks of "word " forever, whatever max_tokens says
  endless-body     a JSON body (stream ignored) that never ends
  endless-error    status 500 and an error body that never ends
  huge-line        one server-sent line of 500 MB: "data: {..." and no newline
  bad-utf8         a reply whose content holds bytes that are not UTF-8
  huge-tool-call   one tool call whose arguments are 10^6 characters, in 1,000 deltas
  one-line-tool    the same tool call in a single delta (one ~1 MB line)
  html             status 200, a login page (text/html)
  silent           accepts the request and never answers
  stall            one delta, then nothing
  drop             three deltas, then the connection is cut (no finish)

and GET /v1/models lists "good", or, with `endless_models`, a list that never ends.

`stats` counts bytes sent and open replies per model, so a test sees the remote being
hung up on. Every endless answer also stops by itself after `limit_s` (no leaked task).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

GOOD_REPLY = ["Hello ", "from ", "the ", "good ", "remote."]
TOOL_ARGUMENT_CHARS = 10**6


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@dataclass
class FakeRemote:
    url: str = ""
    limit_s: float = 120.0
    endless_models: bool = False  # GET /v1/models answers a list that never ends
    sent: Counter[str] = field(default_factory=Counter)  # bytes per model
    open: Counter[str] = field(default_factory=Counter)  # replies being written per model
    runner: web.AppRunner | None = None

    async def start(self) -> FakeRemote:
        # A client hanging up on an endless answer is what the tests want, not an error.
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self.runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        if not self.endless_models:
            return web.json_response({"object": "list", "data": [{"id": "good", "object": "model"}]})
        self.open["models"] += 1
        try:
            response = await self._stream(request, "application/json")
            await self._write(response, "models", b'{"object": "list", "data": [')
            await self._forever(response, "models", b'{"id": "m", "object": "model"}, ' * 2048)
            return response
        finally:
            self.open["models"] -= 1

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = str(body.get("model"))
        self.open[model] += 1
        try:
            return await getattr(self, "_" + model.replace("-", "_"))(request, body, model)
        except (ConnectionError, asyncio.CancelledError):
            raise  # the client hung up: what the bounded tests want
        finally:
            self.open[model] -= 1

    async def _stream(self, request: web.Request, content_type: str = "text/event-stream",
                      status: int = 200) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": content_type})
        await response.prepare(request)
        return response

    async def _write(self, response: web.StreamResponse, model: str, data: bytes) -> None:
        await response.write(data)
        self.sent[model] += len(data)

    async def _good(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "".join(GOOD_REPLY)}}]})
        response = await self._stream(request)
        for piece in GOOD_REPLY:
            await self._write(response, model, chunk({"content": piece}))
        await self._write(response, model, chunk({}, "stop"))
        await self._write(response, model, b"data: [DONE]\n\n")
        return response

    async def _forever(self, response: web.StreamResponse, model: str, piece: bytes) -> None:
        until = time.monotonic() + self.limit_s
        while time.monotonic() < until:
            await self._write(response, model, piece)

    async def _endless_stream(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        await self._forever(response, model, chunk({"content": "word "}) * 64)
        return response

    async def _endless_body(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request, "application/json")
        await self._write(response, model, b'{"choices": [{"message": {"content": "')
        await self._forever(response, model, b"a" * 65536)
        return response

    async def _endless_error(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request, "application/json", status=500)
        await self._write(response, model, b'{"error": {"message": "')
        await self._forever(response, model, b"b" * 65536)
        return response

    async def _huge_line(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        await self._write(response, model, b'data: {"choices": [{"delta": {"content": "')
        block = b"a" * (1024 * 1024)
        for _ in range(500):
            await self._write(response, model, block)
        return response

    async def _bad_utf8(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        await self._write(response, model, b'data: {"choices": [{"delta": {"content": "ok \xff\xfe\xc3 then"}}]}\n\n')
        await self._write(response, model, chunk({"content": " fine."}, "stop"))
        await self._write(response, model, b"data: [DONE]\n\n")
        return response

    def _tool_arguments(self) -> str:
        head = '{"text": "'
        return head + "x" * (TOOL_ARGUMENT_CHARS - len(head) - 2) + '"}'

    async def _huge_tool_call(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        arguments = self._tool_arguments()
        call = {"index": 0, "id": "call_big", "type": "function", "function": {"name": "echo", "arguments": ""}}
        await self._write(response, model, chunk({"tool_calls": [call]}))
        step = len(arguments) // 1000
        for at in range(0, len(arguments), step):
            piece = {"index": 0, "function": {"arguments": arguments[at:at + step]}}
            await self._write(response, model, chunk({"tool_calls": [piece]}))
        await self._write(response, model, chunk({}, "tool_calls"))
        await self._write(response, model, b"data: [DONE]\n\n")
        return response

    async def _one_line_tool(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        call = {"index": 0, "id": "call_big", "type": "function",
                "function": {"name": "echo", "arguments": self._tool_arguments()}}
        await self._write(response, model, chunk({"tool_calls": [call]}, "tool_calls"))
        await self._write(response, model, b"data: [DONE]\n\n")
        return response

    async def _html(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        return web.Response(text="<html><body>Sign in to continue</body></html>", content_type="text/html")

    async def _silent(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        await asyncio.sleep(self.limit_s)
        return web.Response(text="too late")

    async def _stall(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        await self._write(response, model, chunk({"content": "Starting"}))
        await asyncio.sleep(self.limit_s)
        return response

    async def _drop(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = await self._stream(request)
        for piece in ("Half ", "a ", "reply"):
            await self._write(response, model, chunk({"content": piece}))
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.abort()  # the remote went away: no finish, no [DONE]
        return response
