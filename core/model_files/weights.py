"""Safetensors weights: the index that lists the shards, and each file's header.

Read from the header alone, so a 10 GB file is checked in microseconds; a cut or
garbled header is a ValueError saying what is wrong, never a crash or a huge read
(safetensors itself refuses headers over 100 MB).
"""

from __future__ import annotations

import struct
from pathlib import Path

from core import json_text
from core.model_files.json_files import json_object

MAX_SAFETENSORS_HEADER = 100_000_000


def index_shards(index: Path) -> list[str]:
    """The weight files a *.safetensors.index.json names; ValueError when its weight_map is
    not a table of plain file names (a name with a folder in it could reach outside)."""
    weight_map = json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) and v and Path(v).name == v and v not in (".", "..")
            for v in weight_map.values()):
        raise ValueError("its weight_map is not a table of file names")
    return sorted(set(weight_map.values()))


def safetensors_extent(path: Path) -> tuple[int, int]:
    """(bytes the file needs, bytes it has), the first from the header alone; ValueError
    saying what is wrong with a cut or garbled header (OSError: unreadable)."""
    size = path.stat().st_size
    if size < 8:
        raise ValueError(f"{size} bytes")
    with path.open("rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > size - 8:
            raise ValueError("header cut short")
        if header_len > MAX_SAFETENSORS_HEADER:
            raise ValueError("header larger than safetensors allows")
        raw = f.read(header_len)
    try:
        header = json_text.loads(raw)
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise ValueError("unreadable header") from None
    return 8 + header_len + end, size
