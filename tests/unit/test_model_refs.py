"""What a conversation stores to find its model again, and how older labels read."""

from __future__ import annotations

from core.model_refs import ModelRef, display, make, parse


def test_a_local_path_keeps_its_engine_and_a_remote_needs_none() -> None:
    assert make("/m/gemma.gguf", "llamacpp") == "llamacpp:/m/gemma.gguf"
    assert make("/m/qwen", None) == "/m/qwen"
    assert make("remote:gpu/llama", "llamacpp") == "remote:gpu/llama"
    assert make(None, "mlx") is None
    assert parse("llamacpp:/m/gemma.gguf") == ModelRef("/m/gemma.gguf", "llamacpp")
    assert parse("/m/qwen") == ModelRef("/m/qwen")
    assert parse("remote:gpu/llama").remote == ("gpu", "llama")


def test_labels_from_before_refs_read_as_labels() -> None:
    assert parse("Gemma 3 270M (Q4_K_M, bundled)").is_label
    assert parse("scripted-test").is_label
    assert parse("weird:thing").is_label  # not a known engine prefix


def test_notices_name_a_model_by_its_one_id() -> None:
    assert display("mlx:/models/Qwen3-0.6B-4bit/") == "qwen3:0.6b-4bit"
    assert display("llamacpp:/m/gemma-3-270m-q4_k_m.gguf") == "gemma3:270m-q4_k_m"
    assert display("remote:gpu/llama-70b") == "gpu/llama-70b"
    assert display("scripted-test") == "scripted-test"
