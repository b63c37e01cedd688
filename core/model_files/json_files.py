"""A model folder's JSON files (config.json, a safetensors index), read bounded.

They come from the Hub (or anywhere), so they are read bounded in size as well as in
nesting (core.json_text). No real config.json or index comes near 64 MiB (a
1T-parameter index is a few MB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import json_text

MAX_MODEL_JSON_BYTES = 64 << 20


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object a model file (config.json, an index) holds; raises ValueError saying
    why not (bad JSON, bad UTF-8, too big, or JSON of another kind) or OSError."""
    if path.stat().st_size > MAX_MODEL_JSON_BYTES:
        raise ValueError(f"it is larger than {MAX_MODEL_JSON_BYTES >> 20} MiB")
    data = json_text.loads(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"it holds a JSON {type(data).__name__}, not an object")
    return data


def is_vlm_dir(path: str | Path) -> bool:
    """Whether `path` is a model folder mlx-vlm can load as a vision model (its config
    names a vision tower); a text-only MLX folder is not. A config that is hostile or
    unreadable makes it "not a vision model", not a crash."""
    try:
        data = json_object(Path(path) / "config.json")
    except (OSError, ValueError):
        return False
    return isinstance(data.get("vision_config"), dict)
