"""Per-model presets (core.presets): a readable TOML file beside config.toml, every value
checked by the settings' own rules, nothing lost to a bad file."""

from __future__ import annotations

import tomllib

from core import paths, presets
from core.config import Settings


def write(text: str) -> None:
    path = presets.presets_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_a_saved_preset_reads_back_and_other_models_keep_theirs() -> None:
    s = Settings(context_size=8192, system_prompt="Be terse.")
    s.sampling.temperature, s.sampling.top_p, s.sampling.max_tokens = 0.3, 0.8, 2048
    presets.save("qwen3:4b-4bit", presets.from_settings(s, thinking=False))
    presets.save("gemma3:270m-q4_k_m", presets.Preset(sampling={"temperature": 1.0}))
    raw = tomllib.loads(presets.presets_path().read_text())  # readable by people as TOML
    assert raw["presets"]["qwen3:4b-4bit"]["sampling"]["temperature"] == 0.3
    assert raw["presets"]["qwen3:4b-4bit"]["thinking"] is False
    found = presets.load()
    assert found.problems == []
    qwen = found.get("qwen3:4b-4bit")
    assert qwen is not None and qwen.context_size == 8192 and qwen.system_prompt == "Be terse."
    assert qwen.sampling["top_p"] == 0.8 and qwen.sampling["max_tokens"] == 2048
    assert found.get("gemma3:270m-q4_k_m").sampling == {"temperature": 1.0}
    assert presets.presets_path().parent == paths.config_path().parent


def test_refused_values_are_sentences_and_the_rest_still_counts() -> None:
    write('[presets."m:1b"]\ncontext_size = 10\nthinking = "yes"\ncolour = "red"\n'
          '[presets."m:1b".sampling]\ntemperature = 9\ntop_k = 20\nmax_tokens = 99999999\n'
          '[presets."ok:2b"]\nsystem_prompt = "hi"\n')
    found = presets.load()
    text = " ".join(found.problems)
    assert "context_size ignored: Context size must be between" in text
    assert "thinking ignored: thinking must be true or false" in text
    assert "colour ignored" in text and "Temperature must be between 0 and 2" in text
    assert "Max tokens must be less than the context size" in text
    assert found.get("m:1b").sampling == {"top_k": 20}
    assert found.get("ok:2b").system_prompt == "hi"


def test_a_damaged_file_is_a_problem_and_a_save_keeps_it_aside() -> None:
    write('[presets."m:1b"\ntemperature = ')
    found = presets.load()
    assert found.by_model == {} and "could not be read" in found.problems[0]
    presets.save("m:1b", presets.Preset(context_size=2048))
    kept = presets.presets_path().with_name("presets.kept.toml")
    assert kept.read_text().startswith('[presets."m:1b"\ntemperature')
    assert presets.load().get("m:1b").context_size == 2048


def test_a_huge_file_is_not_read() -> None:
    write("# x\n" * (presets.MAX_FILE_BYTES // 4 + 10))
    found = presets.load()
    assert found.by_model == {} and "larger than" in found.problems[0]


def test_apply_puts_the_values_in_and_says_when_the_model_must_reload() -> None:
    s = Settings(context_size=4096, system_prompt="global")
    s.sampling.max_tokens = 3000
    assert presets.apply(s, presets.Preset(sampling={"temperature": 0.1}, system_prompt="mine"))\
        is False
    assert (s.sampling.temperature, s.system_prompt) == (0.1, "mine")
    assert presets.apply(s, presets.Preset(context_size=2048)) is True
    assert s.context_size == 2048 and s.sampling.max_tokens < 2048  # still a valid pair


def test_the_key_is_the_models_short_id() -> None:
    assert presets.model_key("/nowhere/gemma-3-270m-it-Q4_K_M.gguf", "x") == "gemma3:270m-it-q4_k_m"
    assert presets.model_key(None, "Qwen3-4B-4bit") == "qwen3:4b-4bit"


def test_thinking_switch_is_read_from_the_chat_template() -> None:
    assert presets.thinking_switch({"chat_template": "{% if enable_thinking %}"})
    assert not presets.thinking_switch({"chat_template": "{{ messages }}"})
    assert not presets.thinking_switch({})
