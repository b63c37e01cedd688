"""Is a model artifact whole? Cheap structural checks, no weights loaded.

The rules are ARCHITECTURE.md's engine rules: a GGUF file starts with the GGUF magic and
a known version; an MLX directory holds what mlx-lm loads, judged by the one rule the
engine uses too (core.model_files.mlx_folder: config.json, a tokenizer, model*.safetensors
weights, shards only with an index that names files present), refused in its sentence.
Each safetensors header must parse and its tensors must fit the file, which catches
truncated copies.
"""

from __future__ import annotations

import struct
from pathlib import Path

from core.model_files import MlxFolderError, mlx_weight_files, safetensors_extent

GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> str | None:
    """None when the file looks like a whole GGUF, else what is wrong with it."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    if len(head) < 24 or head[:4] != GGUF_MAGIC:
        return "not a GGUF file (bad magic)"
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version not in (2, 3):
        return f"unsupported GGUF version {version}"
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        return "GGUF header is corrupt"
    return None


def check_safetensors(path: Path) -> str | None:
    """None when the header parses and every tensor lies inside the file."""
    try:
        expected, size = safetensors_extent(path)
    except OSError as exc:
        return f"{path.name}: unreadable ({exc.strerror or exc})"
    except ValueError as exc:
        return f"{path.name}: {exc} (truncated or garbled?)"
    if expected > size:
        return f"{path.name}: tensors run past the end of the file (truncated?)"
    return None


def check_mlx_dir(path: Path) -> str | None:
    """None when the directory is a loadable MLX model by the engine rules, else the
    sentence the engine would refuse it with (core.model_files.mlx_folder), or what is
    wrong with a weight file's header."""
    try:
        shards = mlx_weight_files(path)
    except MlxFolderError as exc:
        return exc.message
    for shard in shards:
        if problem := check_safetensors(shard):
            return problem
    return None
