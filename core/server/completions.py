"""POST /v1/completions: OpenAI's legacy text completions, raw text in, raw text out.

Clients written before chat (and many evaluation harnesses) send a prompt and want the
model to continue it: no chat template, no reasoning or tool-call parsing. The request
goes to the same backend and worker as chat, as a GenerationRequest carrying `prompt`
instead of messages; the sampling parameters are chat's (core.server.wire), and the
request's life (admission, the load wait, metrics, cancel on hang-up) is every route's:
core.server.dialects.generation (this module is handed the ChatServer).

`logprobs` is the legacy shape: an integer 0-20 asks for the sampled tokens'
log-probabilities plus that many alternatives per token, answered as {tokens,
token_logprobs, top_logprobs: [{token: logprob}], text_offset}. text_offset counts
characters from the start of the prompt, as OpenAI and llama-cpp-python do, so the first
completion token sits at len(prompt).

Kept out of core.server.app (which registers the route) so the two endpoints can change
apart; it takes the server as a parameter, never by import (no import circle).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from core.config import Sampling
from core.engines.base import MAX_TOP_LOGPROBS, GenerationRequest
from core.events import Done, Error, Event, Logprobs, TextDelta, Usage
from core.server.collect import collect
from core.server.dialects import generation
from core.server.limits import MAX_CHARS_PER_TOKEN
from core.server.sse import KEEPALIVE_COMMENT, EarlyStream, json_response, write_stream
from core.server.wire import (
    ApiError,
    ChatCall,
    api_error_for,
    finish_for,
    parse_model,
    parse_sampling,
    parse_stream,
    usage_body,
)

# Engines that take a raw prompt (the vision engine renders its own chat; a remote
# backend speaks chat only).
RAW_ENGINES = ("mlx", "llamacpp", "scripted")


async def admit_raw_prompt(server: Any, model: str, prompt: str, otherwise: str) -> None:
    """400 unless `model` takes a raw prompt (no chat template) and `prompt` can fit its
    context: chat's size check counts messages, and a raw prompt has none. The one check
    for every door that sends a raw prompt (/v1/completions, Ollama's raw generate);
    `otherwise` says what that door's client can do instead. Waits for a loading model
    (404/503 as chat)."""
    backend = await server._backend_for(model)
    facts = server.model_facts(backend)
    engine = facts.info.get("engine") if backend.kind == "local" else None
    if engine not in RAW_ENGINES:
        raise ApiError(400, "A raw prompt (no chat template) needs a local text model (MLX or "
                       f"GGUF); this model ({engine or 'remote'}) {otherwise}.", param="model",
                       code="unsupported_model")
    context = facts.context_size
    if context > 0 and len(prompt) > context * MAX_CHARS_PER_TOKEN:
        raise ApiError(400, f"The prompt is {len(prompt):,} characters long; this model's "
                       f"context is {context:,} tokens, which holds at most "
                       f"{context * MAX_CHARS_PER_TOKEN:,} characters however they tokenise. "
                       "Send a shorter prompt.", param="prompt", code="context_length_exceeded")


@dataclass(frozen=True, slots=True)
class CompletionCall:
    """A validated /v1/completions body."""

    model: str
    request: GenerationRequest
    stream: bool
    include_usage: bool
    echo: bool
    logprobs: int | None  # alternatives per token; None: no logprobs asked


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _prompt(body: Mapping[str, Any]) -> str:
    """The one prompt as text: a string or a list holding one string."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise _bad("'prompt' is empty; send the text the model should continue.", "prompt")
        return prompt
    if prompt is None:
        raise _bad("'prompt' is required: the text the model should continue.", "prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        raise _bad(f"'prompt' holds {len(prompt)} prompts; this server completes one prompt per "
                   "request. Send one request per prompt.", "prompt")
    if isinstance(prompt, list) and prompt and all(
            isinstance(p, int) and not isinstance(p, bool) or isinstance(p, list) for p in prompt):
        raise _bad("'prompt' as token ids is not supported; send the prompt as text.", "prompt")
    raise _bad("'prompt' must be a string (or a list holding one string).", "prompt")


def parse_completion(body: Any, defaults: Sampling) -> CompletionCall:
    """Validate a completions body; raise ApiError(400) naming the bad parameter."""
    model = parse_model(body)
    suffix = body.get("suffix")
    if suffix not in (None, ""):
        raise _bad("'suffix' (fill-in-the-middle) is not supported; send the text before the "
                   "gap as 'prompt' only.", "suffix")
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        raise _bad("Only best_of=1 is supported; send several requests for several answers.",
                   "best_of")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise _bad("'echo' must be true or false.", "echo")
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise _bad(f"'logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS} (alternatives "
                   f"per token; got {json.dumps(logprobs)[:40]}).", "logprobs")
    if echo and logprobs is not None:
        raise _bad("'echo' with 'logprobs' is not supported: the prompt's own tokens are not "
                   "scored. Send one of the two.", "echo")
    prompt = _prompt(body)
    sampling = parse_sampling(body, defaults, logprobs=logprobs is not None,
                              top_logprobs=logprobs or 0)
    stream, include_usage = parse_stream(body)
    user = body.get("user")
    request = GenerationRequest(request_id=uuid.uuid4().hex, messages=(), sampling=sampling,
                                session_id=user if isinstance(user, str) else None,
                                prompt=prompt)
    return CompletionCall(model, request, stream, include_usage, echo, logprobs)


class _LegacyLogprobs:
    """Engine logprob entries (chat's shape) turned into the legacy shape, chunk by chunk;
    text offsets run on across chunks."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def convert(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                     "text_offset": []}
        for entry in entries:
            token = str(entry.get("token", ""))
            out["tokens"].append(token)
            out["token_logprobs"].append(entry.get("logprob"))
            top: dict[str, Any] = {}
            for alt in entry.get("top_logprobs") or ():  # best first; a text two tokens
                top.setdefault(str(alt["token"]), alt["logprob"])  # share ("\ufffd") keeps its best
            top[token] = entry.get("logprob")  # the sampled token is always there
            out["top_logprobs"].append(top)
            out["text_offset"].append(self.offset)
            self.offset += len(token)
        return out


def _prompt_terms(error: ApiError) -> ApiError:
    """An engine's context error, said about a prompt rather than a conversation."""
    if error.code == "context_length_exceeded":
        error.message = (error.message.replace("The conversation", "The prompt")
                         .replace("Send fewer or shorter messages", "Send a shorter prompt"))
        error.param = "prompt"
    return error


class CompletionsRoute:
    """The /v1/completions handler over a ChatServer, passed in by core.server.app.

    Only the raw-prompt checks are its own; the rest of a request's life (the model's
    backend and load wait, queue limit, active count, metrics under /v1/completions,
    the close that cancels a vanished client's request) is chat's, through
    core.server.dialects.generation."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def handle(self, request: web.Request) -> web.StreamResponse:
        server = self.server
        call = parse_completion(await server._body(request), server.runtime.settings.sampling)
        await self._admit_raw(call)
        chat = ChatCall(call.model, call.request, call.stream, call.include_usage)
        # a stream opens while a long prompt is prefilled: headers, then SSE comments
        early = (EarlyStream(request, server.limits.write_timeout_s, b"", KEEPALIVE_COMMENT)
                 if call.stream else None)
        try:
            async with generation(server, chat, "/v1/completions",
                                  early=early) as (first, batches):
                if early is not None:
                    return await self._stream(request, call, first, batches, early)
                return await self._complete(call, first, batches)
        except ApiError as exc:  # an engine's context error, said about a prompt
            raise _prompt_terms(exc) from None

    async def _admit_raw(self, call: CompletionCall) -> None:
        await admit_raw_prompt(self.server, call.model, call.request.prompt or "",
                               "is served through /v1/chat/completions only")

    async def _complete(self, call: CompletionCall, first: list[Event],
                        batches: AsyncIterator[list[Event]]) -> web.Response:
        prompt = call.request.prompt or ""
        got = await collect(first, batches)
        if got.error is not None:
            raise _prompt_terms(api_error_for(got.error))
        text = (prompt if call.echo else "") + "".join(got.text)
        logprobs = (_LegacyLogprobs(len(prompt)).convert(got.logprobs)
                    if call.logprobs is not None else None)
        body = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion",
                "created": int(time.time()), "model": call.model,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs,
                             "finish_reason": finish_for(got.finish, False)}],
                "usage": usage_body(got.usage)}
        return json_response(body)

    async def _stream(self, request: web.Request, call: CompletionCall, first: list[Event],
                      batches: AsyncIterator[list[Event]],
                      early: EarlyStream) -> web.StreamResponse:
        """SSE `text_completion` chunks: one per batch of events (one token when the client
        keeps up), carrying that batch's text and its tokens' logprobs; then the finish,
        usage when stream_options asks, and [DONE]."""
        head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion",
                "created": int(time.time()), "model": call.model}
        prompt = call.request.prompt or ""
        legacy = _LegacyLogprobs(len(prompt)) if call.logprobs is not None else None

        def chunk(text: str, logprobs: dict[str, Any] | None, finish: str | None) -> bytes:
            body = {**head, "choices": [{"index": 0, "text": text, "logprobs": logprobs,
                                         "finish_reason": finish}]}
            return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

        out = bytearray(chunk(prompt, None, None) if call.echo else b"")
        usage: Usage | None = None

        def encode(batch: list[Event]) -> bool:
            """Append the batch's chunks to `out`; True when it ended the stream."""
            nonlocal usage
            text: list[str] = []
            entries: list[dict[str, Any]] = []
            for event in batch:
                if isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, Logprobs):
                    entries.extend(event.content)
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Error):  # headers are sent: the error travels in the stream
                    out.extend(b"data: " + json.dumps(
                        _prompt_terms(api_error_for(event)).body()).encode() + b"\n\n")
                    return True
                elif isinstance(event, Done):
                    if text or entries:
                        out.extend(chunk("".join(text), legacy.convert(entries) if legacy else None,
                                         None))
                    out.extend(chunk("", None, finish_for(event.finish_reason, False)))
                    if call.include_usage:
                        out.extend(b"data: " + json.dumps({**head, "choices": [],
                                                           "usage": usage_body(usage)}).encode()
                                   + b"\n\n")
                    out.extend(b"data: [DONE]\n\n")
                    return True
            if text or entries:
                out.extend(chunk("".join(text), legacy.convert(entries) if legacy else None, None))
            return False

        return await write_stream(request, self.server.limits.write_timeout_s, out, encode,
                                  first, batches, early)
