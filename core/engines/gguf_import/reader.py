"""Reads a GGUF file's metadata and dequantised tensors with the `gguf` package.

Kept apart from the per-architecture modules so each of those only says how names,
shapes and config keys map, the way mlx-lm keeps one file per architecture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


class GGUFFile:
    """Metadata lookup and tensor iteration over one GGUF file (memory-mapped)."""

    def __init__(self, path: Path) -> None:
        from gguf import GGUFReader

        self.path = path
        self._reader = GGUFReader(str(path))
        self.arch = str(self.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        field = self._reader.fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except AttributeError:  # older gguf: decode by hand
            parts = [field.parts[i] for i in field.data]
            if len(parts) == 1:
                value = parts[0]
                return bytes(value).decode() if value.dtype == np.uint8 else value.item()
            return [p.item() if p.size == 1 else bytes(p).decode() for p in parts]

    def arch_get(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped key such as `{arch}.block_count`."""
        return self.get(f"{self.arch}.{key}", default)

    def tensor_names(self) -> list[str]:
        return [t.name for t in self._reader.tensors]

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Yield (gguf name, float32 array in numpy/HF order) one tensor at a time."""
        from gguf.quants import dequantize

        for t in self._reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape))
            arr = dequantize(t.data, t.tensor_type)
            yield t.name, np.asarray(arr, dtype=np.float32).reshape(shape)
