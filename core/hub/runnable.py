"""Can this machine run a model? Engine choice by artifact plus a memory estimate.

The engine rules are ARCHITECTURE.md's (a .gguf file -> llama.cpp; a directory of
config.json + tokenizer + safetensors -> MLX, which runs on Metal/CUDA or its CPU
backend). Memory is estimated from the weights' size, because weights dominate what a
loaded model needs; the margin covers KV cache at a modest context and runtime buffers.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import psutil

from core.wire.hub import Runnable, human_bytes  # noqa: F401  (the hub's names)

OVERHEAD_FRACTION = 0.20
OVERHEAD_BYTES = 512 * 1024 * 1024




def estimate_memory_bytes(weights_bytes: int) -> int:
    """Bytes a loaded model needs: weights plus a fixed and a proportional margin."""
    return int(weights_bytes * (1 + OVERHEAD_FRACTION)) + OVERHEAD_BYTES


def available_memory_bytes() -> int:
    return int(psutil.virtual_memory().available)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def engine_for_format(fmt: str) -> str | None:
    """The engine that serves a format here: gguf -> llamacpp, mlx -> mlx, when installed."""
    if fmt == "gguf":
        return "llamacpp" if _has("llama_cpp") else None
    if fmt == "mlx":
        return "mlx" if _has("mlx_lm") else None
    return None


@functools.cache
def _mlx_models_dir() -> Path | None:
    """mlx_lm's models folder, found without importing mlx_lm (that import takes seconds)."""
    try:
        spec = importlib.util.find_spec("mlx_lm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def mlx_architecture_supported(model_type: str | None) -> bool:
    """mlx-lm has one module per architecture; no module means it cannot load it."""
    if not model_type:
        return True  # unknown: let the loader decide rather than hide the model
    models = _mlx_models_dir()
    return models is not None and (models / f"{model_type}.py").is_file()


def check_runnable(fmt: str, weights_bytes: int | None, model_type: str | None = None,
                   available: int | None = None) -> Runnable:
    """Decide whether a model of this format and size can run on this machine now.
    `model_type`: config.json's for MLX, the GGUF header's architecture for llama.cpp."""
    free = available_memory_bytes() if available is None else available
    engine = engine_for_format(fmt)
    if engine is None:
        need = estimate_memory_bytes(weights_bytes or 0)
        return Runnable(False, None, need, free, f"no engine installed for {fmt} models")
    if engine == "mlx" and not mlx_architecture_supported(model_type):
        return Runnable(False, engine, 0, free, f"mlx-lm has no '{model_type}' architecture")
    if engine == "llamacpp" and model_type:  # the Hub's gguf.architecture (issue 48)
        from core.model_files.gguf_header import known_to_llama_cpp

        if known_to_llama_cpp(model_type) is False:
            return Runnable(False, engine, 0, free, f"this llama.cpp cannot run {model_type}")
    if weights_bytes is None:
        return Runnable(True, engine, 0, free, "size unknown; fits if the weights do")
    need = estimate_memory_bytes(weights_bytes)
    if need > free:
        return Runnable(
            False, engine, need, free,
            f"needs about {human_bytes(need)} of memory, {human_bytes(free)} is free",
        )
    return Runnable(True, engine, need, free, f"about {human_bytes(need)} of {human_bytes(free)}")


