"""Tensor-name mapping shared by the llama-shaped architectures (llama, qwen2, qwen3, gemma3)."""

from __future__ import annotations

import re
from typing import Any

from core.engines.gguf_import.reader import GGUFFile

_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

LLAMA_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def map_name(name: str, block: dict[str, str]) -> str | None:
    """HF/mlx-lm name for a GGUF tensor name, or None for tensors the model does not use."""
    if name in _TOP:
        return _TOP[name]
    m = _BLOCK_RE.match(name)
    if not m or m.group(2) not in block:
        return None
    return f"model.layers.{m.group(1)}.{block[m.group(2)]}.{m.group(3)}"


def base_config(g: GGUFFile, model_type: str) -> dict[str, Any]:
    """config.json keys every llama-shaped architecture shares."""
    heads = int(g.arch_get("attention.head_count"))
    hidden = int(g.arch_get("embedding_length"))
    tokens = g.get("tokenizer.ggml.tokens") or []
    names = set(g.tensor_names())
    config: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(g.arch_get("block_count")),
        "intermediate_size": int(g.arch_get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g.arch_get("attention.head_count_kv", heads)),
        "head_dim": int(g.arch_get("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
        "vocab_size": int(g.arch_get("vocab_size", len(tokens))),
        "max_position_embeddings": int(g.arch_get("context_length", 4096)),
        "rope_theta": float(g.arch_get("rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in names,
        "eos_token_id": eos_ids(g, tokens),
    }
    bos = g.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        config["bos_token_id"] = int(bos)
    return config


_END_OF_TURN = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>")


def eos_ids(g: GGUFFile, tokens: list[str]) -> list[int]:
    """EOS plus the end-of-turn tokens chat templates close a turn with."""
    ids = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        value = g.get(key)
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    index = {t: i for i, t in enumerate(tokens)} if tokens else {}
    for t in _END_OF_TURN:
        if t in index and index[t] not in ids:
            ids.append(index[t])
    return ids
