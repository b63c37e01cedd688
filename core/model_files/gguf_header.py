"""What a GGUF file's header says about its model, read without loading it.

A GGUF llama.cpp cannot run (an architecture newer than the bundled llama.cpp) failed to
load with "corrupt or truncated, download it again", and a new download fails the same
way (issue 48). The architecture (`general.architecture`, the first key by convention)
tells the two apart. The header is walked key by key and the walk stops at that key:
gguf.GGUFReader parses every key and tensor (most of a minute on a 262k-token vocabulary).
The value types are the gguf package's (gguf.GGUFValueType).

Whether this llama.cpp knows an architecture: llama-cpp-python reports any failed load as
"Failed to load model from file" (llama.cpp only logs "unknown model architecture" on
stderr). The names it knows are a table of C strings in libllama (LLM_ARCH_NAMES), so a
name nowhere in the library as a NUL-terminated string is one this build cannot run. The
test is one-sided on purpose: a name found, or a library not found, keeps the old advice;
only a name surely absent says "this llama.cpp cannot run it", which no new download
changes. The hub asks the same of the Hub's metadata before a download (core.hub.runnable).
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

ARCH_KEY = "general.architecture"
HEADER_READ = 16 * 2**20  # keys before the architecture: a few names and numbers at most
MAX_KEYS = 64  # looked at before giving up; the architecture comes first in every writer

# gguf.GGUFValueType -> its size in bytes (fixed-size scalars only)
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def gguf_architecture(path: Path) -> str | None:
    """The model's architecture as its GGUF header names it ("gemma3", "qwen3"), or None
    when the file is not a GGUF or the header does not say (a damaged file)."""
    try:
        with open(path, "rb") as f:
            buf = f.read(HEADER_READ)
        return _find_string(buf, ARCH_KEY)
    except (OSError, struct.error, UnicodeDecodeError, ValueError):
        return None


def _find_string(buf: bytes, wanted: str) -> str | None:
    if buf[:4] != b"GGUF":
        return None
    version, _tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        return None
    pos = 24
    for _ in range(min(n_kv, MAX_KEYS)):
        key, pos = _string(buf, pos)
        (kind,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if key == wanted:
            return _string(buf, pos)[0] if kind == _STRING else None
        pos = _skip(buf, pos, kind)
    return None


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", buf, pos)
    end = pos + 8 + length
    if end > len(buf):
        raise ValueError("string past the header read")
    return buf[pos + 8:end].decode("utf-8"), end


def _skip(buf: bytes, pos: int, kind: int) -> int:
    if kind in _SCALAR:
        return pos + _SCALAR[kind]
    if kind == _STRING:
        return _string(buf, pos)[1]
    if kind == _ARRAY:
        item, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in _SCALAR:
            return pos + _SCALAR[item] * count
        for _ in range(count):
            pos = _skip(buf, pos, item)
            if pos > len(buf):
                raise ValueError("array past the header read")
        return pos
    raise ValueError(f"unknown GGUF value type {kind}")


@functools.cache
def _llama_library() -> bytes | None:
    """libllama's bytes (llama-cpp-python's own copy), None when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("llama_cpp")  # not imported: that loads the library
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "lib"
    for lib in sorted(folder.glob("libllama.*")):
        try:
            return lib.read_bytes()
        except OSError:
            continue
    return None


def known_to_llama_cpp(arch: str, library: bytes | None = None) -> bool | None:
    """False when this llama.cpp surely does not know `arch`; True when its library names
    it; None when the library could not be read."""
    data = _llama_library() if library is None else library
    if data is None:
        return None
    return arch.encode("utf-8") + b"\x00" in data  # tail-merged: "bert" is in "nomic-bert\0"


def unsupported_architecture(path: Path) -> str | None:
    """The GGUF's architecture when this llama.cpp cannot run it, else None (a known
    architecture, a header that does not say, no library to ask)."""
    arch = gguf_architecture(path)
    if not arch or known_to_llama_cpp(arch) is not False:
        return None
    return arch


def unsupported_sentence(name: str, arch: str) -> str:
    """What the user reads: the file is whole; this llama.cpp is too old for it."""
    arch = "".join(c for c in arch if c.isprintable())[:80]  # the file's words, not ours
    name = "".join(c for c in name if c.isprintable())
    return (f"This llama.cpp cannot run {arch} models, so {name} cannot load here; "
            "downloading it again will not help. Pick a model of another architecture, or "
            "update llama-cpp-python (`.venv/bin/pip install -U llama-cpp-python`).")
