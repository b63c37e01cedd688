"""File names tell the quant, the role and which projector goes with which model."""

from __future__ import annotations

import pytest

from core.hub.filenames import suggested_role
from core.model_files import gguf_shard, is_mmproj, pair_mmproj, quant_label


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"),
        ("llama-3.2-1b-instruct-q8_0.gguf", "Q8_0"),
        ("gemma-3-27b-it-IQ2_XS.gguf", "IQ2_XS"),
        ("model-IQ4_NL.gguf", "IQ4_NL"),
        ("Phi-4-Q5_K_S.gguf", "Q5_K_S"),
        ("Phi-4-Q3_K.gguf", "Q3_K"),
        ("Qwen3-30B-A3B-UD-Q2_K_XL.gguf", "Q2_K_XL"),
        ("gpt-oss-20b-MXFP4.gguf", "mxfp4"),
        ("model-BF16.gguf", "bf16"),
        ("model-f16.gguf", "fp16"),
        ("mlx-community/Qwen3-4B-4bit", "4bit"),
        ("mlx-community/Llama-3.2-3B-Instruct-8bit", "8bit"),
        ("mlx-community/gemma-3-1b-it-bf16", "bf16"),
        ("mlx-community/Mistral-7B-Instruct-v0.3-fp16", "fp16"),
        ("Q4_K_M/model-Q4_K_M-00001-of-00002.gguf", "Q4_K_M"),
        ("config.json", None),
        ("Qwen2.5-7B-Instruct", None),
    ],
)
def test_quant_label_reads_the_conventions_people_use(name: str, label: str | None) -> None:
    assert quant_label(name) == label


def test_mmproj_files_are_told_apart_from_models() -> None:
    assert is_mmproj("mmproj-model-f16.gguf")
    assert is_mmproj("gemma-3-4b-it-mmproj-bf16.gguf")
    assert not is_mmproj("gemma-3-4b-it-Q4_K_M.gguf")
    assert not is_mmproj("mmproj-notes.txt")


def test_shards_are_numbered_parts_of_one_model() -> None:
    assert gguf_shard("big-Q4_K_M-00002-of-00005.gguf") == (2, 5)
    assert gguf_shard("big-Q4_K_M.gguf") is None


def test_projector_pairs_with_the_model_of_the_same_name_and_folder() -> None:
    projs = ["a/mmproj-alpha-f16.gguf", "b/mmproj-beta-f16.gguf", "b/mmproj-beta-Q8_0.gguf"]
    assert pair_mmproj("b/beta-7b-Q4_K_M.gguf", projs) == "b/mmproj-beta-f16.gguf"
    assert pair_mmproj("a/alpha-Q8_0.gguf", projs) == "a/mmproj-alpha-f16.gguf"
    assert pair_mmproj("x.gguf", []) is None


@pytest.mark.parametrize(
    ("repo", "filename", "tag", "has_mmproj", "role"),
    [
        ("acme/chat-GGUF", "chat-Q4_K_M.gguf", "text-generation", False, "chat"),
        ("acme/chat-GGUF", "mmproj-chat-f16.gguf", None, True, "projector"),
        ("acme/see-GGUF", "see-Q4_K_M.gguf", None, True, "vision"),
        ("acme/Qwen2.5-VL-7B-GGUF", "x-Q4_K_M.gguf", None, False, "vision"),
        ("acme/bge-small-en-GGUF", "bge-small-f16.gguf", None, False, "embedding"),
        ("acme/whatever", "w.gguf", "feature-extraction", False, "embedding"),
    ],
)
def test_suggested_role(repo: str, filename: str, tag: str | None, has_mmproj: bool,
                        role: str) -> None:
    assert suggested_role(repo, filename, tag, has_mmproj) == role
