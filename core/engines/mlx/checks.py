"""Refuse what the MLX engine cannot run before it costs a load, then load it.

The folder (core.engines.select), the safetensors headers and the architecture (against
the model types mlx_lm can build) are checked first, so a user-caused failure is an
EngineLoadError with a sentence, never a traceback from deep inside mlx_lm.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import Any

from core.engines.base import EngineLoadError
from core.engines.select import SelectionError, check_mlx_dir, check_safetensors
from core.model_files import json_object

# Modules of mlx_lm.models that are building blocks, not architectures.
_NOT_ARCHITECTURES = frozenset(
    {
        "activations",
        "base",
        "bitlinear_layers",
        "cache",
        "gated_delta",
        "mla",
        "pipeline",
        "rope_utils",
        "ssm",
        "switch_layers",
    }
)


def supported_architectures() -> list[str]:
    """Every config model_type mlx_lm can build, read from its models package."""
    import mlx_lm.models
    from mlx_lm.utils import MODEL_REMAPPING

    names = {
        m.name
        for m in pkgutil.iter_modules(mlx_lm.models.__path__)
        if m.name not in _NOT_ARCHITECTURES
    }
    names |= {k for k, v in MODEL_REMAPPING.items() if v in names}
    return sorted(names)


def check_architecture(config: dict[str, Any]) -> str:
    """Return the model_type or raise EngineLoadError(UNSUPPORTED) before loading."""
    model_type = str(config.get("model_type", ""))
    supported = supported_architectures()
    if model_type not in supported:
        raise EngineLoadError(
            "UNSUPPORTED",
            f"Model architecture '{model_type}' is not supported by the MLX engine. "
            f"Supported: [{', '.join(supported)}]",
        )
    return model_type


def load_model(path: Path) -> tuple[Any, Any, dict[str, Any]]:
    """Load model and tokenizer, turning user-caused failures into EngineLoadError."""
    try:
        weights = check_mlx_dir(path)
        for w in weights:
            check_safetensors(w)
    except SelectionError as exc:
        raise EngineLoadError(exc.code, exc.message) from exc
    try:  # the Hub's words: read bounded (check_mlx_dir has looked at it once already)
        config = json_object(path / "config.json")
    except (OSError, ValueError) as exc:
        raise EngineLoadError("MODEL_CORRUPT", f"config.json is unreadable: {exc}") from exc
    check_architecture(config)
    from mlx_lm.utils import load

    try:
        model, tokenizer = load(str(path))
    except ValueError as exc:
        raise EngineLoadError(
            "MODEL_CORRUPT",
            f"The weights in {path} do not match its config.json ({exc}); re-download "
            "or re-import the model.",
        ) from exc
    except Exception as exc:  # noqa: BLE001 - anything else is a load failure, reported
        raise EngineLoadError("LOAD_FAILED", f"Could not load {path}: {exc}") from exc
    return model, tokenizer, config
