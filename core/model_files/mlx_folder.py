"""What an MLX model folder must hold for mlx-lm to load it: the one rule, and the one
sentence per refusal, that the hub's validity check (core.hub.validate) and the engine's
choice (core.engines.select) share.

mlx_lm.utils.load reads config.json, builds the tokenizer from one of TOKENIZER_SETS and
loads every `model*.safetensors` in the folder; weights under any other name are never
read, so a folder whose only weights are `weights.safetensors` fails with "No safetensors
found" (the two checks each had their own rule and both let it pass). mlx-lm does not
read a `*.safetensors.index.json`, but a download that has one is whole only when every
shard it names is there, and those must be names mlx-lm reads; several shards without an
index may be a download cut short, so they are refused too.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from core.model_files.json_files import json_object
from core.model_files.tokenizer import has_tokenizer, tokenizer_needs
from core.model_files.weights import index_shards

# The weight files mlx_lm.utils.load_model reads (it globs exactly this).
MLX_WEIGHTS = "model*.safetensors"


class MlxFolderError(ValueError):
    """The folder is not one mlx-lm can load; `code` is an events.Error code (LOAD_FAILED:
    something is absent; MODEL_CORRUPT: something is damaged), `message` a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def mlx_weight_files(folder: Path) -> list[Path]:
    """The weight files mlx-lm will load from `folder`, or MlxFolderError saying why the
    folder will not load. Reads config.json and an index (bounded), no weights."""
    name = folder.name
    needs = f"an MLX model folder needs config.json, tokenizer files and {MLX_WEIGHTS} weights"
    if not (folder / "config.json").is_file():
        raise MlxFolderError("LOAD_FAILED", f"{name} has no config.json; {needs}.")
    try:
        json_object(folder / "config.json")
    except (OSError, ValueError) as exc:
        raise MlxFolderError(
            "MODEL_CORRUPT", f"{name}'s config.json is not a model config ({exc}); re-download it."
        ) from exc
    if not has_tokenizer(folder):
        raise MlxFolderError(
            "LOAD_FAILED",
            f"{name} has no tokenizer (expected {tokenizer_needs()}); "
            "copy the tokenizer files from the model's repository.",
        )
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        index = indexes[0]
        try:
            needed = index_shards(index)
        except (OSError, ValueError) as exc:
            raise MlxFolderError(
                "MODEL_CORRUPT", f"{index.name} is not a valid safetensors index ({exc})."
            ) from exc
        missing = [n for n in needed if not (folder / n).is_file()]
        if missing:
            raise MlxFolderError(
                "MODEL_CORRUPT",
                f"{index.name} lists weight files that are missing: {', '.join(missing)}; "
                "finish or repeat the download.",
            )
        unread = [n for n in needed if not fnmatchcase(n, MLX_WEIGHTS)]
        if unread:
            raise MlxFolderError(
                "LOAD_FAILED",
                f"{index.name} lists weight files mlx-lm does not read ({', '.join(unread)}): "
                f"it loads only {MLX_WEIGHTS}; convert the model with mlx_lm.convert.",
            )
        return [folder / n for n in needed]
    shards = sorted(folder.glob(MLX_WEIGHTS))
    if not shards:
        others = sorted(p.name for p in folder.glob("*.safetensors"))
        if others:
            raise MlxFolderError(
                "LOAD_FAILED",
                f"{name}'s weights ({', '.join(others)}) are not named {MLX_WEIGHTS}, the "
                "only files mlx-lm loads; rename a single file to model.safetensors.",
            )
        raise MlxFolderError("LOAD_FAILED", f"{name} has no {MLX_WEIGHTS} weights; {needs}.")
    if len(shards) > 1:
        names = ", ".join(s.name for s in shards)
        raise MlxFolderError(
            "MODEL_CORRUPT",
            f"{name} has several weight shards ({names}) but no *.safetensors.index.json "
            "saying how they fit together; download the index file too.",
        )
    return shards
