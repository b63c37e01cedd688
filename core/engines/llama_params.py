"""Loading llama_cpp.Llama with model parameters its constructor does not take.

Why: llama.cpp's "extra buffer types" (weights repacked at load for AMX and other CPU
kernels) crashed every multi-token batch of the bundled Gemma with SIGSEGV inside
llama_decode on an Intel CPU with AMX (Sapphire Rapids, under a VM; llama-cpp-python 0.3.35
and 0.3.36 built natively): the worker died on the first prompt. One-token batches, and
the same build with the extra buffers off, ran. So where the CPU advertises AMX they are
off (the plain CPU kernels serve instead); LLMDECK_LLAMA_REPACK=1 turns them back on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU advertises AMX tiles (Linux; False where it cannot tell)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and " amx_tile" in line for line in text.splitlines())


def repack_weights() -> bool:
    """Whether llama.cpp may use its extra (repacked-weight) buffer types here."""
    setting = os.environ.get("LLMDECK_LLAMA_REPACK")
    if setting is not None:
        return setting.strip() not in ("", "0", "false", "no")
    return not cpu_has_amx()


def load_llama(**kwargs: Any) -> Any:
    """llama_cpp.Llama(**kwargs), with repacked weights off where repack_weights() says so.

    Llama() starts from llama_model_default_params() and has no argument for
    use_extra_bufts, so the defaults it reads are adjusted for the length of this call.
    """
    import llama_cpp.llama_cpp as low
    from llama_cpp import Llama

    if repack_weights():
        return Llama(**kwargs)
    defaults = low.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = without_extra_buffers
    try:
        return Llama(**kwargs)
    finally:
        low.llama_model_default_params = defaults
