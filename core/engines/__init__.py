"""Inference engines: one protocol, several back ends (llama.cpp, MLX).

Worker processes import this package before their engine, so the face loads what it names
only when asked (PEP 562).
"""

from __future__ import annotations

from typing import Any

__all__ = ["import_gguf_main"]


def __getattr__(name: str) -> Any:
    if name == "import_gguf_main":  # `llmdeck models import`
        from core.engines.gguf_import import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
