"""What a model file's name says: its quantisation, whether it is a vision projector,
which projector goes with it, and the projectors lying beside it on disk.

Repos on the Hub name their files by convention (llama.cpp's Q4_K_M, mlx-community's
-4bit, mmproj-*.gguf for vision projectors). The hub reads these names to list a repo
without opening a byte; the llama.cpp engine reads the same rule to pick the projector a
downloaded model loads with, so the file the hub paired is the file that loads.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

# Longest alternatives first so Q4_K_M is not read as Q4_K.
_GGUF_QUANT = re.compile(
    r"(?<![A-Za-z0-9])("
    r"IQ[1-4]_(?:XXS|XS|NL|S|M)|"
    r"TQ[12]_0|"
    r"Q[2-8]_K(?:_[SML]|_XL)?|"
    r"Q[4-8]_[01]|"
    r"MXFP4(?:_MOE)?|"
    r"BF16|F16|FP16|F32|FP32"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_MLX_BITS = re.compile(r"(?<![A-Za-z0-9])([2-8])[-_]?bit(?![A-Za-z0-9])", re.IGNORECASE)
_FLOAT = re.compile(r"(?<![A-Za-z0-9])(bf16|fp16|f16|fp32|f32|fp8|mxfp4)(?![A-Za-z0-9])", re.I)

_FLOAT_LABEL = {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "fp32": "fp32", "f32": "fp32",
                "fp8": "fp8", "mxfp4": "mxfp4"}


def quant_label(name: str) -> str | None:
    """The quantisation a file or repo name announces (Q4_K_M, IQ2_XS, 4bit, bf16), if any."""
    base = PurePosixPath(name).name
    if m := _GGUF_QUANT.search(base):
        label = m.group(1)
        return _FLOAT_LABEL.get(label.lower(), label.upper())
    if m := _MLX_BITS.search(base):
        return f"{m.group(1)}bit"
    if m := _FLOAT.search(base):
        return _FLOAT_LABEL[m.group(1).lower()]
    return None


def is_mmproj(name: str) -> bool:
    """A llama.cpp vision projector (mmproj-*.gguf, *-mmproj-*.gguf)."""
    base = PurePosixPath(name).name.lower()
    return base.endswith(".gguf") and "mmproj" in base


def is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def gguf_shard(name: str) -> tuple[int, int] | None:
    """(part, total) for split GGUFs named like model-00001-of-00003.gguf."""
    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", name, re.IGNORECASE)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _stem_tokens(name: str) -> set[str]:
    base = PurePosixPath(name).name.lower().removesuffix(".gguf")
    base = _GGUF_QUANT.sub("", base)
    return {t for t in re.split(r"[-_.]+", base) if t and t != "mmproj"}


def pair_mmproj(model_file: str, mmprojs: list[str]) -> str | None:
    """The projector that goes with `model_file`: same folder, most name overlap, smallest
    quant preference left to the caller (we pick f16/bf16 first, as llama.cpp suggests)."""
    if not mmprojs:
        return None
    folder = str(PurePosixPath(model_file).parent)
    same_dir = [m for m in mmprojs if str(PurePosixPath(m).parent) == folder] or mmprojs
    model_tokens = _stem_tokens(model_file)

    def score(m: str) -> tuple[int, int, str]:
        label = quant_label(m) or ""
        prefer = 1 if label in ("fp16", "bf16") else 0
        return (len(model_tokens & _stem_tokens(m)), prefer, m)

    return max(same_dir, key=score)


def sibling_mmprojs(p: Path) -> list[Path]:
    """The vision projectors beside a GGUF model file on disk (by is_mmproj's rule), sorted
    by name; core.engines.llama_vision picks one with pair_mmproj when there are several."""
    try:
        return sorted(f for f in p.parent.iterdir()
                      if f != p and is_mmproj(f.name) and f.is_file())
    except OSError:
        return []
