"""What every API dialect other than OpenAI's chat shares: auth, errors, admission.

`llmdeck serve` also speaks Anthropic's Messages API, OpenAI's Responses API and
Ollama's API, so tools built for those (Claude Code, Codex, Ollama front ends) work
against it unchanged. Each dialect lives in its own module and only translates: its
body is checked at the same edge as chat (ChatServer._body: size, time, UTF-8, nesting,
numbers), turned into an OpenAI chat body, and validated by the same core.server.wire
parse_chat into the same GenerationRequest. Then it is admitted here exactly as the chat
route admits it (the model's backend, images, prompt size, queue limit), so a request
in any dialect meets the same pool, the same bounds and the same refusals.

Errors leave in the dialect's own shape: each route is wrapped by `guarded` with the
dialect's renderer, and the auth middleware answers a missing or wrong key on a
dialect's path in that dialect's shape too (Anthropic clients send `x-api-key`, the
others a bearer token).

The server is taken as a parameter (typed Any, as core.server.completions does), never
imported; core.server.dialect_routes puts the routes on the app.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from aiohttp import web

from core.events import Error, Event, PromptRead
from core.remote.backend import event_batches
from core.server.images import has_images, resolve_images
from core.server.limits import check_prompt_size, too_large
from core.server.metrics import Metered, metrics_for
from core.server.one_call import FirstCallOnly, OneCallBatches
from core.server.request_log import note
from core.server.sse import EarlyStream
from core.server.wire import ApiError, ChatCall, api_error_for

log = logging.getLogger("llmdeck.serve")

Render = Callable[[ApiError], web.Response]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guarded(render: Render) -> Callable[[Handler], Handler]:
    """Wrap a dialect's handler so every refusal leaves in that dialect's shape: ApiError,
    aiohttp's own 413, and a bug (one log line naming its type, never the request)."""

    def wrap(handler: Handler) -> Handler:
        async def guarded_handler(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except ApiError as exc:
                response = render(exc)
                if exc.status in (408, 413):  # the rest of the body is not wanted
                    response.force_close()
                return response
            except web.HTTPRequestEntityTooLarge as exc:
                response = render(too_large(getattr(exc, "actual_size", None)))
                response.force_close()
                return response
            except (asyncio.CancelledError, ConnectionError):
                raise  # the client went away: nobody to answer
            except Exception as exc:
                log.warning("serve: internal error on %s %s: %s", request.method, request.path,
                            type(exc).__name__)
                return render(ApiError(500, "The server hit an internal error handling this "
                                       f"request ({type(exc).__name__}); retry it."))

        guarded_handler.__doc__ = handler.__doc__
        return guarded_handler

    return wrap


IGNORED_TOOLS_HEADER = "x-llmdeck-ignored-tools"


def ignored_tools_header(names: list[str], route: str) -> dict[str, str]:
    """The header that names the hosted tools a request sent and this server left out
    (it runs no tools of its own: web search, file search, code execution), and one log
    line saying so; {} when none were."""
    if not names:
        return {}
    listed = ", ".join(dict.fromkeys(n.encode("ascii", "replace").decode().replace("\r", " ")
                                     .replace("\n", " ") for n in names))
    log.info("serve: %s: left out hosted tools this server cannot run: %s", route, listed[:300])
    return {IGNORED_TOOLS_HEADER: listed[:1000]}


# -- auth ---------------------------------------------------------------------------


def _same(given: str, expected: str) -> bool:
    # aiohttp keeps undecodable header bytes as surrogates: encode them back, never raise
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


def key_matches(request: web.Request, api_key: str) -> bool:
    """The server's key, sent as `Authorization: Bearer <key>` or as `x-api-key: <key>`
    (Anthropic's SDK and Claude Code with ANTHROPIC_API_KEY send the latter)."""
    bearer = request.headers.get("Authorization", "")
    if bearer and _same(bearer, f"Bearer {api_key}"):
        return True
    header = request.headers.get("x-api-key", "")
    return bool(header) and _same(header, api_key)


KEY_MESSAGE = ("Missing or wrong API key: send 'Authorization: Bearer <key>' (or 'x-api-key: "
               "<key>') with the key this server was started with.")


def auth_middleware(server: Any, renderers: list[tuple[str, Render]]) -> Any:
    """Checks the key on the dialects' paths (a prefix each, with its error renderer).

    Runs before the OpenAI error middleware, which checks `Authorization` alone on /v1/:
    a request that passed here with `x-api-key` is handed on with the same key as a
    bearer token, so both doors take the same key.
    """

    @web.middleware
    async def dialect_auth(request: web.Request, handler: Any) -> web.StreamResponse:
        key = server.api_key
        if key:
            for prefix, render in renderers:
                if request.path == prefix or request.path.startswith(prefix + "/"):
                    if not key_matches(request, key):
                        return render(ApiError(401, KEY_MESSAGE, code="invalid_api_key"))
                    if "x-api-key" in request.headers and not _same(
                            request.headers.get("Authorization", ""), f"Bearer {key}"):
                        headers = request.headers.copy()
                        headers["Authorization"] = f"Bearer {key}"
                        request = request.clone(headers=headers)
                    break
        return await handler(request)

    return dialect_auth


def shape_middleware(renderers: list[tuple[str, Render]], hints: dict[str, str]) -> Any:
    """The router's own refusals (unknown path, wrong method) on a dialect's paths, in
    that dialect's shape; `hints` adds a sentence per prefix (what is served there).

    Innermost, so it sees the router's exception before the OpenAI error middleware
    turns it into OpenAI's shape."""

    @web.middleware
    async def dialect_shape(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status not in (404, 405):
                raise
            for prefix, render in renderers:
                if request.path == prefix or request.path.startswith(prefix + "/"):
                    where = f"{request.method} {request.path[:200]}"
                    message = (f"{request.path[:200]} does not accept {request.method}."
                               if exc.status == 405 else f"{where} is not an endpoint of this server.")
                    hint = hints.get(prefix)
                    return render(ApiError(exc.status, f"{message} {hint}" if hint else message))
            raise

    return dialect_shape


# -- admission ----------------------------------------------------------------------


async def _keep_open(server: Any, early: EarlyStream, handler: asyncio.Task[Any] | None,
                     first_came: asyncio.Event) -> None:
    """While the first batch is awaited: open the stream after limits.stream_open_s, then
    a keep-alive every limits.keepalive_s. A client that has gone cancels the handler
    (and so the prefill in the worker)."""
    limits = server.limits
    wait = limits.stream_open_s
    while True:
        try:
            await asyncio.wait_for(first_came.wait(), wait)
            return
        except TimeoutError:
            pass
        try:
            ok = await (early.ping() if early.opened else early.open())
        except (ConnectionError, RuntimeError):  # gone before the headers could leave
            ok = False
        if not ok:
            if handler is not None:
                handler.cancel()
            return
        wait = limits.keepalive_s


async def _first_batch(server: Any, batches: AsyncIterator[list[Event]],
                       early: EarlyStream | None) -> list[Event]:
    """The first batch; with `early`, the stream is kept open while it is prefilled."""
    if early is None:
        return await anext(batches)
    first_came = asyncio.Event()
    ticker = asyncio.ensure_future(_keep_open(server, early, asyncio.current_task(), first_came))
    try:
        while True:  # a PromptRead (the count before the prefill) is kept for the opening
            batch = await anext(batches)
            rest = [e for e in batch if not isinstance(e, PromptRead)]
            if len(rest) < len(batch):
                early.prompt_read = next(e for e in batch if isinstance(e, PromptRead))
                if early.opened:  # a client gone meanwhile: aiohttp cancels this handler
                    await early.send_opening()
            if rest:
                return rest
    finally:
        first_came.set()  # the ticker ends after any write it is in (never cut mid-chunk)
        await asyncio.shield(ticker)


@asynccontextmanager
async def generation(server: Any, call: ChatCall, route: str = "",
                     keep: float | None | str = "absent", early: EarlyStream | None = None,
                     ) -> AsyncIterator[tuple[list[Event], AsyncIterator[list[Event]]]]:
    """Admit `call` as the chat route does and yield (first batch, the rest).

    The model's backend (404 unknown, 503 failed, waiting for a load), images turned
    into files (or a 400), the prompt's size against the context, the queue limit; an
    error before any output is raised as the ApiError chat would answer. Leaving the
    block closes the generation, which cancels it in the worker if it still runs. Its
    tokens and timings go to the server's metrics under `route`. `keep`: the request's
    keep_alive (core.server.local_models.keep_alive_of), applied to its model. `early`: a
    stream to open and keep alive while the prompt is prefilled (core.server.sse); once it
    is open, an error in the first batch is yielded for the route to send in the stream.
    """
    rt = server.runtime
    backend = await server._backend_for(call.model)
    facts = server.model_facts(backend)
    if backend.kind == "local" and has_images(call.request):  # files, or a 400
        call = replace(call, request=await resolve_images(
            call.request, model=call.model, sees=facts.vision,
            allow_file_urls=bool(getattr(rt.settings, "serve_allow_file_urls", False)),
            max_bytes=rt.chat.max_bytes()))
    if backend.kind == "local":
        check_prompt_size(call.request, facts.context_size, facts.info)
    if backend.queued() >= server.max_queue:
        raise ApiError(429, f"The queue is full ({server.max_queue} requests waiting); retry "
                       "shortly.", code="queue_full")
    batches = event_batches(backend, call.request)
    meter = metrics_for(server).meter(route or "other")
    served_as = server.model_id(backend, call.model)  # for the log line: the id, not the alias
    server.active += 1
    try:
        if backend.kind == "local":  # right before the reply takes its lease: nothing between
            server.local_models.keep(backend.key, keep)
        first = await _first_batch(server, batches, early)
        if isinstance(first[0], Error) and (early is None or not early.opened):
            raise api_error_for(first[0])
        rest: AsyncIterator[list[Event]] = batches
        if call.one_call:  # parallel_tool_calls false: the first call only
            keep = FirstCallOnly()
            first, rest = keep(first), OneCallBatches(batches, keep)
        meter.saw(first)
        yield first, Metered(rest, meter)
    finally:
        server.active -= 1
        meter.done()
        note(served_as, meter.usage)  # for the request's log line (core.server.request_log)
        await batches.aclose()  # a vanished client cancels its request in the worker

