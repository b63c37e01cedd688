"""The recommended list is data: every entry names a real build for both machine kinds,
the families the first-run guide promises are there, and fit is model + KV cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.hub import HubError, fit, load_recommended, machine_format


@pytest.mark.parametrize("fmt", ["gguf", "mlx"])
def test_every_entry_has_a_build_per_machine_kind(fmt: str) -> None:
    recs = load_recommended(fmt)
    assert len(recs) >= 6
    for r in recs:
        assert r.format == fmt and r.repo.count("/") == 1 and r.size_bytes > 10**8
        assert r.licence and r.good_at and r.kv_bytes_per_token > 0
        if fmt == "gguf":
            assert r.file and r.file.endswith(".gguf") and "Q4_K_M" in r.file.upper()
        else:
            assert r.file is None and r.repo.startswith("mlx-community/") and "4bit" in r.repo
    families = {r.family for r in recs}
    assert {"Qwen3", "Gemma 3", "Llama 3.x", "reasoning", "tool calling", "vision"} <= families


def test_machine_kind_picks_mlx_only_on_apple_silicon() -> None:
    assert machine_format("Darwin", "arm64") == "mlx"
    assert machine_format("Darwin", "x86_64") == "gguf"
    assert machine_format("Linux", "aarch64") == "gguf"


def test_fit_counts_the_kv_cache_at_the_context() -> None:
    qwen = next(r for r in load_recommended("gguf") if r.family == "Qwen3")
    # 36 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 147,456 bytes a token
    assert qwen.kv_bytes_per_token == 147_456
    assert fit(qwen, 4096, total=16 * 10**9).verdict == "ok"
    need = qwen.size_bytes + 147_456 * 32768
    assert fit(qwen, 32768, total=need).verdict == "tight"
    assert fit(qwen, 32768, total=need - 1).verdict == "too_big"


def test_a_malformed_list_names_the_file_and_entry(tmp_path: Path) -> None:
    bad = tmp_path / "r.toml"
    bad.write_text('[[model]]\nname = "X"\n[model.gguf]\nrepo = "a/b"\n')
    with pytest.raises(HubError) as err:
        load_recommended("gguf", bad)
    assert str(bad) in err.value.message and "model #1 (X)" in err.value.message
