"""What a file on the Hub is most likely for, from its repo's name and tags.

What a model file's own name says (its quant label, whether it is a vision projector,
which projector goes with it) is a model-file fact the engines read too: it lives in
core.model_files.names. This guess needs the Hub's words (repo ids, pipeline tags).
"""

from __future__ import annotations

from core.model_files import is_mmproj

_EMBED_HINTS = ("embed", "minilm", "bge-", "e5-", "gte-", "nomic-embed", "sentence")
_VISION_HINTS = ("-vl", "vl-", "vision", "llava", "pixtral", "smolvlm", "gemma-3n", "qwen2.5-vl")


def suggested_role(repo_id: str, filename: str = "", pipeline_tag: str | None = None,
                   has_mmproj: bool = False) -> str:
    """chat, embedding, vision or projector: what the file is most likely for."""
    if filename and is_mmproj(filename):
        return "projector"
    text = f"{repo_id}/{filename}".lower()
    if pipeline_tag in ("feature-extraction", "sentence-similarity") or any(
        h in text for h in _EMBED_HINTS
    ):
        return "embedding"
    if has_mmproj or pipeline_tag in ("image-text-to-text", "image-to-text") or any(
        h in text for h in _VISION_HINTS
    ):
        return "vision"
    return "chat"
