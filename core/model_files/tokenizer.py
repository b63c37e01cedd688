"""Which files make a model folder's tokenizer: the one rule the hub and the engines share.

mlx-lm builds the tokenizer with transformers' AutoTokenizer, which loads from any one of
these sets (tried on real folders: tests/unit/test_model_files_tokenizer.py):
- tokenizer.json, the `tokenizers` serialisation nearly every repo ships;
- tokenizer.model, a SentencePiece model (converted at load);
- vocab.json with merges.txt, a byte-level BPE in GPT-2's two files.
tokenizer_config.json alone holds settings, not a vocabulary (transformers either refuses
the folder or builds an empty tokenizer that encodes every text to nothing), and
vocab.json alone is half a BPE (refused). tokenizer.tiktoken loads only through a repo's
own code, which llmdeck does not run.
"""

from __future__ import annotations

from pathlib import Path

TOKENIZER_SETS: tuple[tuple[str, ...], ...] = (
    ("tokenizer.json",),
    ("tokenizer.model",),
    ("vocab.json", "merges.txt"),
)


def has_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds every file of at least one tokenizer set."""
    return any(all((folder / name).is_file() for name in files) for files in TOKENIZER_SETS)


def tokenizer_needs() -> str:
    """The sets in words, for a sentence telling a person what to copy."""
    words = [" with ".join(files) for files in TOKENIZER_SETS]
    return ", ".join(words[:-1]) + f", or {words[-1]}"
