"""Keep torch out of an MLX text worker that cannot need it.

transformers 5 imports torch at import time whenever torch is installed (sentence-transformers
brings it for the docs index), about 1.3 s of CPU at every MLX worker start, though an MLX
model whose tokenizer is a plain `tokenizer.json` with no custom code never calls it. For such
a folder the worker marks torch absent before mlx_lm loads, the way transformers sees an
install without torch; any other folder (custom code, a slow tokenizer, an image processor)
loads as before. LLMDECK_WORKER_TORCH=1 turns this off.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def plain_fast_tokenizer(folder: Path) -> bool:
    """Whether the folder's tokenizer and config load without torch: a tokenizer.json,
    no `auto_map` (remote code) in either config, and no image or audio processor."""
    if not folder.is_dir() or not (folder / "tokenizer.json").is_file():
        return False
    if any((folder / name).exists() for name in (
            "preprocessor_config.json", "processor_config.json", "tokenization.py")):
        return False
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or "auto_map" in data:
            return False
    return True


def hide_torch_for(folder: Path) -> bool:
    """Mark torch absent for this process when the folder cannot need it; returns whether it
    did. Only before anything imported torch, and never when the user asked to keep it."""
    if os.environ.get("LLMDECK_WORKER_TORCH") == "1" or "torch" in sys.modules:
        return False
    if not plain_fast_tokenizer(folder):
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]  # find_spec() now says "absent"
    return True
