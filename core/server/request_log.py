"""One line per HTTP request for `llmdeck serve`'s terminal, and the serve banner.

A person running `serve` wants to see that a client reached it and what came of it:
method, path, model, status, tokens and time, one line each (never what was said:
conversations reach no log). The middleware times every request from its arrival
(STARTED_KEY, also Ollama's total_duration) and the admission (core.server.dialects)
notes the model and the tokens; the line goes to ChatServer.request_log when one is
set (the standalone server prints it, the service sends it to the `serve` client).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from aiohttp import web

from core.events import Usage
from core.server.status_seen import run_seeing_status

STARTED_KEY = "llmdeck.started"  # request[...]: time.perf_counter() at arrival
_noted: ContextVar[dict[str, Any] | None] = ContextVar("llmdeck_request_noted", default=None)
QUIET_PATHS = frozenset({"/health", "/metrics"})  # probes: polled, not worth a line each


def note(model: str | None = None, usage: Usage | None = None) -> None:
    """What the request being handled asked of which model, and what it used."""
    noted = _noted.get()
    if noted is None:
        return
    if model is not None:
        noted["model"] = model
    if usage is not None:
        noted["usage"] = usage


def line(method: str, path: str, status: int, seconds: float, noted: dict[str, Any]) -> str:
    """`POST /v1/messages gemma3:270m 200 812+24 tok 3.41 s`."""
    usage: Usage | None = noted.get("usage")
    tokens = (f" {usage.prompt_tokens}+{usage.completion_tokens} tok"
              + (f" ({usage.cached_tokens} cached)" if usage.cached_tokens else "")
              if usage is not None else "")
    model = f" {str(noted['model'])[:80]}" if noted.get("model") else ""
    return f"{method} {path[:120]}{model} {status}{tokens} {seconds:.2f} s"


def middleware(server: Any) -> Any:
    """Times each request and hands its line to server.request_log (when set)."""

    @web.middleware
    async def request_log(request: web.Request, handler: Any) -> web.StreamResponse:
        request[STARTED_KEY] = started = time.perf_counter()
        noted: dict[str, Any] = {}
        token = _noted.set(noted)

        def ended(status: int) -> None:
            _noted.reset(token)
            sink: Callable[[str], None] | None = getattr(server, "request_log", None)
            if sink is not None and request.path not in QUIET_PATHS:
                try:
                    sink(line(request.method, request.path, status,
                              time.perf_counter() - started, noted))
                except Exception:  # a log sink never fails a request
                    pass

        return await run_seeing_status(request, handler, ended)

    return request_log


def banner(url: str, api_key: str | None) -> list[str]:
    """Where each dialect's clients point, and the key's state (printed after
    "listening on")."""
    root = url.removesuffix("/v1")
    key = ("required: send it as 'Authorization: Bearer <key>' or 'x-api-key'" if api_key
           else "none (loopback only: any program on this machine may connect)")
    return [f"  OpenAI     {url}   (chat, completions, responses, embeddings, models)",
            f"  Anthropic  {root}   (ANTHROPIC_BASE_URL: /v1/messages)",
            f"  Ollama     {root}   (OLLAMA_HOST: /api/chat, /api/generate, /api/tags)",
            f"  API key    {key}"]
