"""Runs-here verdicts: an engine for the format and enough free memory for the weights."""

from __future__ import annotations

import importlib.util

from core.hub.runnable import check_runnable, estimate_memory_bytes, human_bytes

GB = 1_000_000_000


def test_estimate_covers_more_than_the_weights() -> None:
    assert estimate_memory_bytes(4 * GB) > 4 * GB


def test_a_model_too_big_for_free_memory_is_not_runnable_and_says_why() -> None:
    verdict = check_runnable("gguf", 40 * GB, available=8 * GB)
    if verdict.engine is None:  # no llama.cpp in this environment: that is the reason
        assert not verdict.ok and "no engine" in verdict.reason
        return
    assert not verdict.ok
    assert "memory" in verdict.reason and "8.0 GB" in verdict.reason


def test_a_small_model_runs_when_its_engine_is_installed() -> None:
    verdict = check_runnable("gguf", 300_000_000, available=8 * GB)
    has_llama = importlib.util.find_spec("llama_cpp") is not None
    assert verdict.ok is has_llama
    assert verdict.engine == ("llamacpp" if has_llama else None)


def test_unknown_formats_have_no_engine() -> None:
    verdict = check_runnable("onnx", 1000, available=8 * GB)
    assert not verdict.ok and verdict.engine is None


def test_mlx_rejects_architectures_mlx_lm_does_not_ship() -> None:
    verdict = check_runnable("mlx", 1000, model_type="no_such_arch_xyz", available=8 * GB)
    assert not verdict.ok
    if verdict.engine == "mlx":
        assert "no_such_arch_xyz" in verdict.reason


def test_human_bytes() -> None:
    assert human_bytes(999) == "999 B"
    assert human_bytes(1_500_000) == "1.5 MB"
    assert human_bytes(2_000_000_000) == "2.0 GB"
