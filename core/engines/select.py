"""Chooses the engine for a model artifact from the artifact alone.

A user points llmdeck at a folder or a file; this module says which engine serves it, or
why nothing can, in a sentence they can act on, before any weights are loaded. The rule:
a .gguf file goes to llama.cpp (a sibling mmproj-*.gguf is its vision projector); a
directory with config.json, tokenizer files and safetensors goes to MLX. MLX is
preferred where it has a GPU (Metal or CUDA); elsewhere llama.cpp serves GGUF files and
MLX still runs model directories on its CPU backend.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import json_text

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer.tiktoken")


class SelectionError(Exception):
    """The artifact cannot be served; `code` is an events.Error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Selection:
    engine: str  # "mlx" | "llamacpp"
    path: str
    mmproj: str | None
    reason: str


def mlx_has_gpu() -> bool:
    """True where MLX runs on a GPU (Metal on Apple silicon, CUDA builds elsewhere)."""
    try:
        import mlx.core as mx
    except ImportError:
        return False
    try:
        if mx.metal.is_available():
            return True
    except AttributeError:
        pass
    try:
        return bool(mx.cuda.is_available())
    except AttributeError:
        return False


def select_engine(path: str | Path) -> Selection:
    """Return the engine for `path` or raise SelectionError saying what is wrong."""
    p = Path(path).expanduser()
    if not p.exists():
        raise SelectionError("LOAD_FAILED", f"No model at {p}: the path does not exist.")
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise SelectionError(
                "UNSUPPORTED",
                f"{p.name} is neither a .gguf file nor a model folder; point llmdeck at a "
                "GGUF file or a folder with config.json and safetensors weights.",
            )
        mmproj = _sibling_mmproj(p)
        if "mmproj" in p.name.lower():
            raise SelectionError(
                "UNSUPPORTED",
                f"{p.name} is a vision projector, not a language model; select the main "
                "GGUF file beside it.",
            )
        reason = "GGUF file: served by llama.cpp"
        if mmproj:
            reason += f" with vision projector {Path(mmproj).name}"
        return Selection("llamacpp", str(p), mmproj, reason)
    check_mlx_dir(p)
    where = "GPU" if mlx_has_gpu() else "CPU"
    from core.vision.vlm import is_vlm_dir

    if is_vlm_dir(p):  # its config names a vision tower: mlx-vlm, and it sees images
        return Selection("mlx-vlm", str(p), None,
                         f"MLX vision model folder: served by mlx-vlm on the {where}")
    return Selection("mlx", str(p), None, f"MLX model folder: served by MLX on the {where}")


def check_mlx_dir(p: Path) -> list[Path]:
    """Validate an MLX/HF model folder; return its weight files."""
    if not (p / "config.json").is_file():
        raise SelectionError(
            "LOAD_FAILED",
            f"{p} has no config.json; an MLX model folder needs config.json, tokenizer "
            "files and safetensors weights.",
        )
    try:
        json_object(p / "config.json")
    except (OSError, ValueError) as exc:
        raise SelectionError(
            "MODEL_CORRUPT", f"{p / 'config.json'} is not a model config ({exc}); re-download it."
        ) from exc
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise SelectionError(
            "LOAD_FAILED",
            f"{p} has no tokenizer (expected one of {', '.join(TOKENIZER_FILES)}); "
            "copy the tokenizer files from the model's repository.",
        )
    indexes = sorted(p.glob("*.safetensors.index.json"))
    shards = sorted(p.glob("*.safetensors"))
    if indexes:
        try:
            needed = index_shards(indexes[0])
        except (OSError, ValueError) as exc:
            raise SelectionError(
                "MODEL_CORRUPT", f"{indexes[0].name} is not a valid safetensors index ({exc})."
            ) from exc
        missing = [n for n in needed if not (p / n).is_file()]
        if missing:
            raise SelectionError(
                "MODEL_CORRUPT",
                f"{indexes[0].name} lists weight files that are missing: {', '.join(missing)}; "
                "finish or repeat the download.",
            )
        return [p / n for n in needed]
    if not shards:
        raise SelectionError(
            "LOAD_FAILED", f"{p} has no *.safetensors weights; an MLX model folder needs them."
        )
    if len(shards) > 1:
        names = ", ".join(s.name for s in shards)
        raise SelectionError(
            "MODEL_CORRUPT",
            f"{p} has several weight shards ({names}) but no *.safetensors.index.json "
            "saying how they fit together; download the index file too.",
        )
    return shards


def check_safetensors(path: Path) -> None:
    """Raise SelectionError(MODEL_CORRUPT) when a safetensors file is truncated or garbled.

    Reads only the header, so a 10 GB file is checked in microseconds.
    """
    bad = f"Weights file {path.name} is corrupt or incomplete"
    try:
        expected, size = safetensors_extent(path)
    except ValueError as exc:
        raise SelectionError("MODEL_CORRUPT", f"{bad} ({exc}); re-download it.") from exc
    if size < expected:
        raise SelectionError(
            "MODEL_CORRUPT",
            f"{bad}: expected {expected} bytes, found {size}; re-download it.",
        )


# -- reading a model folder's files, which may be anything -----------------------------------

# A model folder comes from the Hub (or anywhere): its JSON files and safetensors headers are
# read bounded in size as well as in nesting. No real config.json or index comes near 64 MiB
# (a 1T-parameter index is a few MB); safetensors itself refuses headers over 100 MB.
MAX_MODEL_JSON_BYTES = 64 << 20
MAX_SAFETENSORS_HEADER = 100_000_000


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object a model file (config.json, an index) holds; raises ValueError saying
    why not (bad JSON, bad UTF-8, too big, or JSON of another kind) or OSError."""
    if path.stat().st_size > MAX_MODEL_JSON_BYTES:
        raise ValueError(f"it is larger than {MAX_MODEL_JSON_BYTES >> 20} MiB")
    data = json_text.loads(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"it holds a JSON {type(data).__name__}, not an object")
    return data


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


def _sibling_mmproj(p: Path) -> str | None:
    if "mmproj" in p.name.lower():
        return None
    found = sibling_mmprojs(p)
    return str(found[0]) if found else None


def sees_images(path: str | Path) -> bool:
    """Whether the artifact takes images itself, judged before it loads: an mlx-vlm folder,
    or a GGUF with a vision projector beside it. Does disk I/O."""
    p = Path(path).expanduser()
    if p.is_file():
        return p.suffix.lower() == ".gguf" and "mmproj" not in p.name.lower() and bool(
            sibling_mmprojs(p))
    from core.vision.vlm import is_vlm_dir

    return is_vlm_dir(p)


def sibling_mmprojs(p: Path) -> list[Path]:
    """The vision projectors beside a GGUF model file (mmproj-*.gguf, *-mmproj-*.gguf: the
    hub's rule), sorted by name; core.engines.llama_vision picks one when there are several."""
    try:
        return sorted(f for f in p.parent.iterdir()
                      if f != p and f.suffix.lower() == ".gguf" and "mmproj" in f.name.lower()
                      and f.is_file())
    except OSError:
        return []


def default_model() -> Selection:
    """The model llmdeck runs with no download: the bundled Gemma 3 270M.

    Where MLX has a GPU it serves the MLX import of the bundled GGUF (imported once into
    models_dir()); elsewhere llama.cpp serves the GGUF as is.
    """
    from core import paths
    from core.bundled import provision_bundled_chat

    gguf_path = provision_bundled_chat()
    if not mlx_has_gpu():
        return Selection(
            "llamacpp", str(gguf_path), None, "bundled Gemma 3 270M GGUF: MLX has no GPU here"
        )
    out = paths.models_dir() / "gemma-3-270m-mlx"
    if not (out / "config.json").is_file():
        from core.engines.gguf_import import import_gguf

        import_gguf(gguf_path, out)
    return Selection("mlx", str(out), None, "bundled Gemma 3 270M imported to MLX (GPU)")
