"""Is a model artifact whole? Cheap structural checks, no weights loaded.

The rules are ARCHITECTURE.md's engine rules: a GGUF file starts with the GGUF magic and
a known version; an MLX directory has config.json, a tokenizer and safetensors (one file,
or shards with an index that names only files present). Each safetensors header must
parse and its tensors must fit the file, which catches truncated copies.
"""

from __future__ import annotations

import struct
from pathlib import Path

from core.model_files import has_tokenizer, index_shards, json_object, safetensors_extent

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
    """None when the directory is a loadable MLX model by the engine rules."""
    config = path / "config.json"
    if not config.is_file():
        return "no config.json"
    try:
        json_object(config)
    except (OSError, ValueError):
        return "config.json does not parse"
    if not has_tokenizer(path):
        return "no tokenizer files"
    shards = sorted(p for p in path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if not shards:
        return "no .safetensors weights"
    if index.is_file():
        try:
            names = index_shards(index)
        except (OSError, ValueError):
            return "model.safetensors.index.json does not parse"
        missing = [n for n in sorted(names) if not (path / n).is_file()]
        if missing:
            return f"missing shards: {', '.join(missing)}"
        shards = [path / n for n in sorted(names)]
    elif len(shards) > 1:
        return "several safetensors shards but no model.safetensors.index.json"
    for shard in shards:
        if problem := check_safetensors(shard):
            return problem
    return None
