"""GGUF -> MLX import: `llmdeck models import PATH.gguf [--quantize 4|8] [--out DIR]`.

GGUF is what most people download; MLX needs safetensors. This dequantises a GGUF with
the `gguf` package, maps tensor names through one module per architecture (adding an
architecture is adding a file, as in mlx-lm's models/), and writes an mlx-lm model folder:
config.json, model.safetensors, tokenizer files (transformers reads the GGUF tokenizer),
optionally re-quantised to 4 or 8 bits by mlx_lm.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

from core.engines.gguf_import import gemma3, llama, qwen2, qwen3
from core.engines.gguf_import.reader import GGUFFile

ARCHITECTURES: dict[str, ModuleType] = {m.GGUF_ARCH: m for m in (gemma3, llama, qwen2, qwen3)}


class GGUFImportError(Exception):
    """An import the user asked for cannot be done; `code` is an events.Error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def import_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    *,
    quantize: int | None = None,
    dtype: str = "bfloat16",
) -> Path:
    """Write an mlx-lm model folder for `gguf_path` into `out_dir`; return it."""
    import mlx.core as mx

    src = Path(gguf_path).expanduser()
    out = Path(out_dir).expanduser()
    if not src.is_file():
        raise GGUFImportError("LOAD_FAILED", f"No GGUF file at {src}.")
    if quantize not in (None, 4, 8):
        raise GGUFImportError("BAD_REQUEST", f"--quantize takes 4 or 8 (got {quantize}).")
    try:
        g = GGUFFile(src)
    except Exception as exc:  # noqa: BLE001 - gguf raises many kinds on a bad file
        raise GGUFImportError(
            "MODEL_CORRUPT", f"{src.name} is not a readable GGUF file ({exc}); re-download it."
        ) from exc
    arch = ARCHITECTURES.get(g.arch)
    if arch is None:
        raise GGUFImportError(
            "UNSUPPORTED",
            f"GGUF architecture '{g.arch}' cannot be imported to MLX. Supported: "
            f"[{', '.join(sorted(ARCHITECTURES))}]; run this file with the llama.cpp "
            "engine instead.",
        )
    config = arch.build_config(g)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weights = {}
    target = getattr(mx, dtype)
    for name, array in g.tensors():
        converted = arch.convert(name, array, config)
        if converted is not None:
            # Cast now, so the float32 copy is freed before the next tensor arrives.
            weights[converted[0]] = mx.array(converted[1], dtype=target)
            mx.eval(weights[converted[0]])
    if not config["tie_word_embeddings"] and "lm_head.weight" not in weights:
        config["tie_word_embeddings"] = True
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    del weights
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    # No template in the GGUF: the import has none either, so the MLX engine prompts it as
    # a base model (core.engines.base_prompt), as llama.cpp does with the GGUF itself.
    template = g.get("tokenizer.chat_template")
    _write_tokenizer(src, tmp, config["model_type"], template)
    if quantize:
        _requantize(tmp, quantize)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _write_tokenizer(src: Path, out: Path, model_type: str, template: str | None) -> None:
    """tokenizer.json and friends, built by transformers from the GGUF vocabulary.

    The tokenizer class is picked from the config's model_type rather than through
    AutoTokenizer, which would first rebuild the whole model config from the GGUF with
    gguf.GGUFReader (most of a minute for a 262k vocabulary).
    """
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import (
        TOKENIZER_MAPPING_NAMES,
        tokenizer_class_from_name,
    )

    name = TOKENIZER_MAPPING_NAMES.get(model_type)
    cls = tokenizer_class_from_name(name) if isinstance(name, str) else None
    tok = (cls or AutoTokenizer).from_pretrained(str(src.parent), gguf_file=src.name)
    if template:
        tok.chat_template = template
    tok.save_pretrained(str(out))


def _requantize(folder: Path, bits: int) -> None:
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    model, config = load_model(folder)
    model, config = quantize_model(model, config, group_size=64, bits=bits)
    (folder / "model.safetensors").unlink()
    save_model(folder, model)
    save_config(config, folder / "config.json")


def main(argv: list[str] | None = None) -> int:
    """CLI: import a GGUF into the models folder (or --out); print the folder."""
    from core import paths

    parser = argparse.ArgumentParser(prog="llmdeck models import")
    parser.add_argument("gguf", help="path to a .gguf file")
    parser.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    parser.add_argument("--out", default=None, help="output folder (default: models dir)")
    args = parser.parse_args(argv)
    src = Path(args.gguf)
    out = Path(args.out) if args.out else paths.models_dir() / (src.stem + "-mlx")
    try:
        folder = import_gguf(src, out, quantize=args.quantize)
    except GGUFImportError as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2
    print(folder)
    return 0
