"""One list of tokenizer files, checked against what really loads.

The hub's validity check (core.hub.validate) and the engine's (core.engines.select) read
the same rule, core.model_files.tokenizer. Each folder below holds real tokenizer files
(a byte-level BPE trained here, its GPT-2 vocab.json/merges.txt split, a SentencePiece
model) beside a config and weights; mlx-lm's own tokenizer loader says which tokenize,
and both checks must agree with it. Before the rule was shared, a folder with only
tokenizer_config.json was listed valid by the hub and failed to load, and one with only
vocab.json passed the engine's check and failed to load.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from core.engines.select import SelectionError
from core.engines.select import check_mlx_dir as engine_check
from core.hub.validate import check_mlx_dir as hub_check
from core.model_files import has_tokenizer
from tests.fakes.hub_repos import make_safetensors
from tests.fixtures.mlx_models import write_tokenizer

LOADS = [("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"),
         ("tokenizer.json", "tokenizer_config.json")]
REFUSED = [("tokenizer_config.json",), ("vocab.json",), ("merges.txt",),
           ("vocab.json", "tokenizer_config.json"), ()]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every tokenizer file a folder below may hold, real and small (~1 s to build)."""
    import sentencepiece as spm
    from tokenizers import Tokenizer

    src = tmp_path_factory.mktemp("tokenizer-files")
    write_tokenizer(src)  # tokenizer.json + tokenizer_config.json
    Tokenizer.from_file(str(src / "tokenizer.json")).model.save(str(src))  # vocab.json, merges.txt
    corpus = src / "corpus.txt"
    corpus.write_text("hello world, this is a test\nthe quick brown fox jumps over the dog\n" * 40)
    with contextlib.redirect_stderr(io.StringIO()):
        spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(src / "tokenizer"),
                                       vocab_size=40, model_type="bpe", minloglevel=2)
    return src


def _folder(root: Path, sources: Path, files: tuple[str, ...]) -> Path:
    folder = root / ("+".join(files) or "none")
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    make_safetensors(folder / "model.safetensors", 1024)
    for name in files:
        shutil.copy(sources / name, folder / name)
    return folder


def _tokenizes(folder: Path) -> bool:
    """Whether mlx-lm's loader (what the MLX engine calls) gives a tokenizer that encodes:
    transformers 5 builds an empty one for some folders rather than refusing them."""
    from mlx_lm.utils import load_tokenizer

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return len(load_tokenizer(folder).encode("hello world")) > 0
    except (ValueError, OSError, TypeError):
        return False


def _engine_refusal(folder: Path) -> str | None:
    """The engine's sentence refusing the folder (None: accepted)."""
    try:
        engine_check(folder)
    except SelectionError as exc:
        assert "no tokenizer" in exc.message and "merges.txt" in exc.message
        return exc.message
    return None


@pytest.mark.parametrize("files", LOADS, ids=lambda f: "+".join(f))
def test_a_folder_whose_tokenizer_loads_is_valid_to_the_hub_and_the_engine(
        tmp_path: Path, sources: Path, files: tuple[str, ...]) -> None:
    folder = _folder(tmp_path, sources, files)
    assert _tokenizes(folder)
    assert has_tokenizer(folder)
    assert hub_check(folder) is None
    assert _engine_refusal(folder) is None


@pytest.mark.parametrize("files", REFUSED, ids=lambda f: "+".join(f) or "none")
def test_a_folder_whose_tokenizer_does_not_load_is_refused_by_both(
        tmp_path: Path, sources: Path, files: tuple[str, ...]) -> None:
    folder = _folder(tmp_path, sources, files)
    assert not _tokenizes(folder)
    assert not has_tokenizer(folder)
    refusal = _engine_refusal(folder)
    assert refusal is not None and hub_check(folder) == refusal  # one sentence for both
