"""GGUF `gemma3` -> mlx-lm `gemma3_text`.

llama.cpp stores Gemma's RMSNorm weights with the +1 folded in (Gemma computes
x * (1 + w)); mlx-lm adds the 1 itself, so every norm weight gets 1 subtracted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.engines.gguf_import._common import LLAMA_BLOCK, base_config, map_name
from core.engines.gguf_import.reader import GGUFFile

GGUF_ARCH = "gemma3"

_BLOCK = {
    **LLAMA_BLOCK,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}


def build_config(g: GGUFFile) -> dict[str, Any]:
    config = base_config(g, "gemma3_text")
    config["sliding_window"] = int(g.arch_get("attention.sliding_window", 512))
    config["sliding_window_pattern"] = 6
    config["rope_local_base_freq"] = 10000.0
    config["query_pre_attn_scalar"] = config["head_dim"]
    return config


def convert(name: str, w: np.ndarray, config: dict[str, Any]) -> tuple[str, np.ndarray] | None:
    hf = map_name(name, _BLOCK)
    if hf is None:
        return None
    if "norm" in hf:
        w = w - 1.0
    return hf, w
