"""Model ids in Ollama's name:tag style, keep_alive durations, and the [aliases] and
[keep_alive] tables of config.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import keep_alive
from core.config import Settings
from core.model_ids import base_id, unique_ids


@pytest.mark.parametrize(("name", "quant", "expected"), [
    ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M", "gemma3:270m-q4_k_m"),  # the bundled model
    ("Qwen3-4B-Q4_K_M.gguf", "Q4_K_M", "qwen3:4b-q4_k_m"),
    ("Qwen3-4B-4bit", "4bit", "qwen3:4b-4bit"),
    ("Llama-3.2-3B-Instruct-Q8_0.gguf", None, "llama3.2:3b-instruct-q8_0"),
    ("Qwen3-30B-A3B-Instruct-2507-4bit", None, "qwen3:30b-a3b-instruct-4bit"),
    ("Qwen2.5-Coder-7B-Instruct-IQ4_XS.gguf", None, "qwen2.5-coder:7b-instruct-iq4_xs"),
    ("gpt-oss-20b-MXFP4.gguf", None, "gpt-oss:20b-mxfp4"),
    ("my model", None, "my-model:latest"),
    ("../../etc/passwd\x00", None, "passwd:latest"),
])
def test_ids_come_from_family_size_and_quant(name: str, quant: str | None, expected: str) -> None:
    assert base_id(name, quant) == expected


def test_ids_are_unique_and_stable_when_two_builds_clash() -> None:
    models = [("Qwen3-4B-4bit", "4bit", "mlx", "/b/qwen-mlx"),
              ("Qwen3-4B-4bit.gguf", "4bit", "gguf", "/a/qwen.gguf"),
              ("Qwen3-4B-4bit.gguf", "4bit", "gguf", "/c/qwen.gguf")]
    ids = unique_ids(models)
    assert ids == ["qwen3:4b-4bit-mlx", "qwen3:4b-4bit", "qwen3:4b-4bit-2"]
    assert unique_ids(list(reversed(models))) == list(reversed(ids))  # order does not matter


@pytest.mark.parametrize(("value", "seconds"), [
    (0, 0.0), ("0", 0.0), (300, 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("10s", 10.0),
    (-1, None), ("-1", None), ("-5m", None), (10**12, None)])
def test_keep_alive_reads_ollamas_forms(value: object, seconds: float | None) -> None:
    assert keep_alive.parse(value) == seconds


@pytest.mark.parametrize("value", ["soon", "", "5x", "m5", True, [1], "9" * 50, "nan"])
def test_a_keep_alive_we_cannot_read_says_what_is_expected(value: object) -> None:
    with pytest.raises(keep_alive.KeepAliveError) as refused:
        keep_alive.parse(value)
    assert '"5m"' in str(refused.value)


def test_aliases_and_per_model_keep_alive_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[aliases]\nfast = "gemma3:270m-q4_k_m"\n"bad name!" = "x"\nworse = 3\n'
                    '[keep_alive]\nfast = "30m"\n"qwen3:4b-4bit" = -1\nslow = "later"\n')
    settings = Settings.load(path)
    assert settings.aliases == {"fast": "gemma3:270m-q4_k_m"}
    assert settings.keep_alive_for("gemma3:270m-q4_k_m") == 1800.0  # through its alias
    assert settings.keep_alive_for("qwen3:4b-4bit") == -1.0  # for ever
    assert settings.keep_alive_for("other:1b") is None  # idle_unload_minutes then
    problems = "\n".join(settings.problems)
    assert "bad name!" in problems and "worse" in problems and "slow" in problems
    settings.save(path)
    again = Settings.load(path)
    assert again.aliases == settings.aliases and again.keep_alive == settings.keep_alive
    assert again.problems == []
