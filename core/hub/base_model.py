"""Is a model on disk a base model (one with no chat template)?

A base model has no chat turns to be prompted with, so the engines give it a plain
transcript prompt (core.engines.base_prompt), and the model picker and status line say
"base model" so a person knows why its answers are short and plain. This reads the same
evidence the engines use: `tokenizer.chat_template` in a GGUF's metadata; for an MLX
folder, `chat_template` in tokenizer_config.json or a chat_template.jinja/.json file.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from core import json_text

# A GGUF metadata key is a u64 length then its bytes; the template's key, so encoded,
# found in the file's head (where the metadata lives) means the file carries a template.
_KEY = b"tokenizer.chat_template"
_GGUF_KEY = struct.pack("<Q", len(_KEY)) + _KEY
_HEAD_BYTES = 64 << 20  # metadata (vocabulary included) is a few MB even for 256k tokens
# tokenizer_config.json came from the Hub: read through the bounded JSON reader (json.loads
# raised RecursionError for one nested 100,000 deep, killing `llmdeck models list`), and
# only up to a size no real one reaches (a chat template is tens of kB).
_MAX_TOKENIZER_CONFIG = 32 << 20


def gguf_has_chat_template(path: Path) -> bool:
    """Whether the GGUF at `path` carries `tokenizer.chat_template` (False if unreadable)."""
    try:
        with open(path, "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m.find(_GGUF_KEY, 0, min(len(m), _HEAD_BYTES)) != -1
    except (OSError, ValueError):
        return False


def mlx_has_chat_template(folder: Path) -> bool:
    """Whether an MLX/transformers model folder ships a chat template."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    path = folder / "tokenizer_config.json"
    try:
        if path.stat().st_size > _MAX_TOKENIZER_CONFIG:
            return False
        config = json_text.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return bool(isinstance(config, dict) and config.get("chat_template"))


def is_base_model(path: Path) -> bool:
    """True when the model at `path` (a .gguf file or a model folder) has no chat template."""
    path = Path(path)
    if path.is_dir():
        return not mlx_has_chat_template(path)
    return not gguf_has_chat_template(path)
