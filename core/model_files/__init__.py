"""What a model's files say, read without loading the model.

The one low room for model-file facts: which files make a tokenizer, how big a model's
JSON files and safetensors headers may be and what they hold, which vision projector goes
with a GGUF file, whether a folder's config names a vision tower. The hub (listing,
validating, the local registry) and the engines (choosing, loading, pairing a projector)
both read it, so neither leans on the other; it imports nothing of llmdeck but
core.json_text.
"""

from core.model_files.json_files import MAX_MODEL_JSON_BYTES, is_vlm_dir, json_object
from core.model_files.mlx_folder import MLX_WEIGHTS, MlxFolderError, mlx_weight_files
from core.model_files.names import (
    gguf_shard,
    is_gguf,
    is_mmproj,
    pair_mmproj,
    quant_label,
    sibling_mmprojs,
)
from core.model_files.tokenizer import TOKENIZER_SETS, has_tokenizer, tokenizer_needs
from core.model_files.weights import MAX_SAFETENSORS_HEADER, index_shards, safetensors_extent

__all__ = [
    "MAX_MODEL_JSON_BYTES",
    "MAX_SAFETENSORS_HEADER",
    "MLX_WEIGHTS",
    "MlxFolderError",
    "TOKENIZER_SETS",
    "gguf_shard",
    "has_tokenizer",
    "index_shards",
    "is_gguf",
    "is_mmproj",
    "is_vlm_dir",
    "json_object",
    "mlx_weight_files",
    "pair_mmproj",
    "quant_label",
    "safetensors_extent",
    "sibling_mmprojs",
    "tokenizer_needs",
]
