"""Reads a GGUF file's metadata and dequantised tensors.

Kept apart from the per-architecture modules so each of those only says how names,
shapes and config keys map, the way mlx-lm keeps one file per architecture.

Why not gguf.GGUFReader: it builds a numpy memmap view per metadata element, which for a
262k-token vocabulary takes the better part of a minute on a laptop core. The header is
a flat little-endian format, so it is walked here with struct over an mmap (well under a
second); tensor data stays memory-mapped and is dequantised by the `gguf` package's own
numpy kernels, fed large slabs of blocks at a time instead of its 16-row groups.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Fixed-size metadata value types: struct format by GGUF type id.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: "u1", 1: "i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
          10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
# Blocks handed to one dequantisation call: big enough that numpy's per-call overhead
# vanishes, small enough that the float32 temporaries stay a few tens of MB.
_SLAB_BLOCKS = 1 << 16


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor's bytes are and how to read them."""

    name: str
    shape: tuple[int, ...]  # numpy/HF order (GGUF stores dimensions the other way round)
    ggml_type: int
    offset: int  # absolute, in the file


class GGUFFile:
    """Metadata lookup and tensor iteration over one GGUF file (memory-mapped)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._fields, self._tensors = _parse(self._map)
        self.arch = str(self.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        value = self._fields.get(key, default)
        return value.tolist() if isinstance(value, np.ndarray) else value

    def arch_get(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped key such as `{arch}.block_count`."""
        return self.get(f"{self.arch}.{key}", default)

    def tensor_names(self) -> list[str]:
        return [t.name for t in self._tensors]

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Yield (gguf name, float32 array in numpy/HF order) one tensor at a time."""
        for t in self._tensors:
            yield t.name, self._dequantize(t)

    def _dequantize(self, t: TensorInfo) -> np.ndarray:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import _type_traits, dequantize

        qtype = GGMLQuantizationType(t.ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
        count = int(np.prod(t.shape, dtype=np.int64))
        nbytes = count // block * type_size
        raw = np.frombuffer(self._map, dtype=np.uint8, count=nbytes, offset=t.offset)
        kernel = _type_traits.get(qtype)
        if kernel is None:  # plain floats (F32, F16, BF16)
            return np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(t.shape)
        kernel.init_grid()
        blocks = raw.reshape(-1, type_size)
        out = np.empty((blocks.shape[0], block), dtype=np.float32)
        for start in range(0, blocks.shape[0], _SLAB_BLOCKS):
            stop = start + _SLAB_BLOCKS
            out[start:stop] = kernel.dequantize_blocks(blocks[start:stop])
        return out.reshape(t.shape)


def _parse(buf: mmap.mmap) -> tuple[dict[str, Any], list[TensorInfo]]:
    """Header, metadata and tensor table; raises ValueError on anything malformed."""
    if buf[:4] != b"GGUF":
        raise ValueError("missing GGUF magic bytes")
    version, n_tensors, n_fields = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not supported")
    pos = 24
    fields: dict[str, Any] = {}
    try:
        for _ in range(n_fields):
            key, pos = _string(buf, pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            fields[key], pos = _value(buf, pos + 4, vtype)
        entries = []
        for _ in range(n_tensors):
            name, pos = _string(buf, pos)
            (ndim,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{ndim}Q", buf, pos + 4)
            ggml_type, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * ndim)
            pos += 4 + 8 * ndim + 12
            entries.append((name, tuple(int(d) for d in reversed(dims)), ggml_type, offset))
    except struct.error as exc:
        raise ValueError(f"truncated header ({exc})") from exc
    align = int(fields.get("general.alignment", 32))
    start = (pos + align - 1) // align * align
    tensors = [TensorInfo(n, s, t, start + o) for n, s, t, o in entries]
    for t in tensors:
        if t.offset > len(buf):
            raise ValueError(f"tensor {t.name} lies past the end of the file (truncated?)")
    return fields, tensors


def _string(buf: mmap.mmap, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    pos += 8
    if pos + n > len(buf):
        raise ValueError("string runs past the end of the file (truncated?)")
    return buf[pos : pos + n].decode("utf-8", errors="replace"), pos + n


def _value(buf: mmap.mmap, pos: int, vtype: int) -> tuple[Any, int]:
    if vtype in _SCALAR:
        fmt = "<" + _SCALAR[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == _STRING:
        return _string(buf, pos)
    if vtype == _ARRAY:
        etype, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _NUMPY:
            dtype = np.dtype(_NUMPY[etype])
            arr = np.frombuffer(buf, dtype=dtype, count=n, offset=pos).copy()
            return arr, pos + n * dtype.itemsize
        values = []
        for _ in range(n):
            value, pos = _value(buf, pos, etype)
            values.append(value)
        return values, pos
    raise ValueError(f"unknown GGUF metadata type {vtype}")
