"""Base models (no chat template) get a transcript prompt, turn-marker stops and a default
repetition penalty; the registry and engines say "base model" from the same evidence."""

from __future__ import annotations

import json
from pathlib import Path

from core.engines.base import SamplingParams
from core.engines.base_prompt import (
    BASE_REPETITION_PENALTY,
    DEFAULT_FORMAT,
    FORMATS,
    base_format,
    effective_repetition_penalty,
)
from core.hub.base_model import is_base_model
from core.parsing.stops import StopMatcher
from tests.fixtures.everyday_questions import judge, repeated_sentence
from tests.fixtures.tools import gguf_with_template


def test_transcript_has_preamble_examples_history_and_ends_on_the_assistant_turn() -> None:
    fmt = base_format()
    text = fmt.render([
        {"role": "system", "content": "Answer like a pirate."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Ahoy."},
        {"role": "user", "content": [{"type": "text", "text": "Where is Paris?"}]},
    ])
    assert text.startswith(fmt.preamble) and "Answer like a pirate." in text.split("User:")[0]
    assert all(q in text for q, _ in fmt.examples)
    assert text.endswith("User: Hi\nAssistant: Ahoy.\n\nUser: Where is Paris?\nAssistant:")


def test_the_next_turn_marker_ends_the_reply_and_never_shows() -> None:
    fmt = base_format()
    m = StopMatcher(fmt.stops)
    shown = "".join(m.feed(piece)[0] for piece in (" Paris is the capital.\n", "\nUs", "er: and"))
    assert m.stopped and "User" not in shown and shown.strip() == "Paris is the capital."


def test_base_models_get_a_repetition_penalty_unless_the_request_sets_one() -> None:
    plain = SamplingParams()
    assert effective_repetition_penalty(plain, base_model=True) == BASE_REPETITION_PENALTY
    assert effective_repetition_penalty(plain, base_model=False) == 1.0
    assert effective_repetition_penalty(SamplingParams(repetition_penalty=1.3), True) == 1.3
    # a presence penalty with its own window must not meet an implicit repetition penalty
    # (llama.cpp has one window for all penalties and would refuse the request)
    own = SamplingParams(presence_penalty=0.5, presence_context_size=128)
    assert effective_repetition_penalty(own, base_model=True) == 1.0
    assert DEFAULT_FORMAT in FORMATS


def test_sentence_repeat_check() -> None:
    assert repeated_sentence("Paris. Paris is big. paris!") == "paris"
    assert repeated_sentence("One. Two.") is None
    verdict = judge("What is the capital of France? Answer in one sentence.",
                    "It is Paris.", "stop", 5)
    assert all(verdict.values())
    assert not judge("x", "a", "length", 120)["ended"]


def test_base_model_detection_reads_the_files(tmp_path: Path, bundled_gguf: Path) -> None:
    assert is_base_model(bundled_gguf)  # the bundled Gemma ships no chat template
    chat = tmp_path / "chat.gguf"
    gguf_with_template(str(bundled_gguf), str(chat), "{{ messages }}")
    assert not is_base_model(chat)
    folder = tmp_path / "mlx"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    assert is_base_model(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    assert not is_base_model(folder)
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("{{ x }}")
    assert not is_base_model(folder)
