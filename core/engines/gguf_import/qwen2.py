"""GGUF `qwen2` -> mlx-lm `qwen2` (biases on Q, K, V; no permutation)."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.engines.gguf_import._common import LLAMA_BLOCK, base_config, map_name
from core.engines.gguf_import.reader import GGUFFile

GGUF_ARCH = "qwen2"


def build_config(g: GGUFFile) -> dict[str, Any]:
    return base_config(g, "qwen2")


def convert(name: str, w: np.ndarray, config: dict[str, Any]) -> tuple[str, np.ndarray] | None:
    hf = map_name(name, LLAMA_BLOCK)
    return None if hf is None else (hf, w)
