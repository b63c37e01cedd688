"""Puts the other dialects' routes on `llmdeck serve`'s app (see core.server.dialects).

Its own module so core.server.app needs one call, and each dialect module stays free of
the others.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from core.server import anthropic, metrics, ollama, ollama_pull, responses
from core.server.dialects import Render, auth_middleware, shape_middleware

HINTS = {"/api": ("This server's Ollama API offers /api/chat, /api/generate, /api/tags, "
                  "/api/show, /api/ps, /api/version, /api/pull (hf.co/<owner>/<repo>:<quant>) "
                  "and /api/delete; models are not pushed or created through the API.")}


async def _root(request: web.Request) -> web.Response:
    """What a probe of the server's root gets (Ollama answers "Ollama is running")."""
    return web.Response(text="llmdeck serve is running: OpenAI at /v1, Anthropic at "
                        "/v1/messages, Ollama at /api\n")


def register(app: web.Application, server: Any) -> None:
    """Add the dialects' routes and their auth middleware (ChatServer.app calls this
    before the app is frozen)."""
    renderers: list[tuple[str, Render]] = [("/v1/messages", anthropic.render_error),
                                           ("/api", ollama.render_error),
                                           ("/metrics", metrics.render_error)]
    app.middlewares.insert(1, auth_middleware(server, renderers))  # after busy_middleware
    app.middlewares.append(shape_middleware(renderers, HINTS))  # innermost
    meter = metrics.metrics_for(server)
    app.middlewares.insert(0, meter.middleware)  # outermost: every answer is counted
    app.router.add_get("/metrics", meter.handle)
    app.router.add_get("/", _root)  # HEAD too: Claude Code and Ollama clients probe it
    anthropic.add_routes(app, server)
    ollama.add_routes(app, server)
    ollama_pull.add_routes(app, server)  # /api/pull, /api/delete: the service's jobs
    responses.add_routes(app, server)
