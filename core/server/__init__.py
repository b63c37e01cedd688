"""The OpenAI-compatible HTTP server (`llmdeck serve`, or toggled inside the TUI).

    from core.server import ServerHandle
    handle = await ServerHandle.start(runtime, "127.0.0.1", 8000)   # same loop, same pool
    handle.url            # "http://127.0.0.1:8000/v1", for any openai client
    await handle.stop()

Endpoints: /v1/chat/completions (SSE streaming or not, tools, reasoning_content, usage),
/v1/models, /v1/embeddings (bundled MiniLM), errors in OpenAI's shape.
"""

from __future__ import annotations

from typing import Any

from core.server.handle import ServeError, ServerHandle, is_loopback

__all__ = ["ServeError", "ServerHandle", "is_loopback", "serve_main"]


def __getattr__(name: str) -> Any:
    if name == "serve_main":  # `llmdeck serve`, loaded only when asked (PEP 562)
        from core.server.cli import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
