"""GGUF `llama` -> mlx-lm `llama`.

llama.cpp's converter permutes the rows of Q and K for its rotary layout; this undoes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.engines.gguf_import._common import LLAMA_BLOCK, base_config, map_name
from core.engines.gguf_import.reader import GGUFFile

GGUF_ARCH = "llama"


def build_config(g: GGUFFile) -> dict[str, Any]:
    config = base_config(g, "llama")
    config["attention_bias"] = False
    config["mlp_bias"] = False
    return config


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(name: str, w: np.ndarray, config: dict[str, Any]) -> tuple[str, np.ndarray] | None:
    hf = map_name(name, LLAMA_BLOCK)
    if hf is None:
        return None
    if hf.endswith("q_proj.weight"):
        w = _unpermute(w, config["num_attention_heads"])
    elif hf.endswith("k_proj.weight"):
        w = _unpermute(w, config["num_key_value_heads"])
    return hf, w
