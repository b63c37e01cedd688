"""Chooses the engine for a model artifact from the artifact alone.

A user points llmdeck at a folder or a file; this module says which engine serves it, or
why nothing can, in a sentence they can act on, before any weights are loaded. The rule:
a .gguf file goes to llama.cpp (a sibling mmproj-*.gguf is its vision projector); a
directory with config.json, tokenizer files and safetensors goes to MLX. MLX is
preferred where it has a GPU (Metal or CUDA); elsewhere llama.cpp serves GGUF files and
MLX still runs model directories on its CPU backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.model_files import (
    MlxFolderError,
    is_mmproj,
    is_vlm_dir,
    mlx_weight_files,
    safetensors_extent,
    sibling_mmprojs,
)


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
        if is_mmproj(p.name):
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
    if is_vlm_dir(p):  # its config names a vision tower: mlx-vlm, and it sees images
        return Selection("mlx-vlm", str(p), None,
                         f"MLX vision model folder: served by mlx-vlm on the {where}")
    return Selection("mlx", str(p), None, f"MLX model folder: served by MLX on the {where}")


def check_mlx_dir(p: Path) -> list[Path]:
    """The folder's weight files, or SelectionError with the sentence the hub shows too
    (core.model_files.mlx_folder: what mlx-lm really needs)."""
    try:
        return mlx_weight_files(p)
    except MlxFolderError as exc:
        raise SelectionError(exc.code, exc.message) from exc


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


def _sibling_mmproj(p: Path) -> str | None:
    if is_mmproj(p.name):
        return None
    found = sibling_mmprojs(p)
    return str(found[0]) if found else None


def sees_images(path: str | Path) -> bool:
    """Whether the artifact takes images itself, judged before it loads: an mlx-vlm folder,
    or a GGUF with a vision projector beside it. Does disk I/O."""
    p = Path(path).expanduser()
    if p.is_file():
        return p.suffix.lower() == ".gguf" and not is_mmproj(p.name) and bool(
            sibling_mmprojs(p))
    return is_vlm_dir(p)


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
