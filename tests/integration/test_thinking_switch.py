"""A model's thinking switch reaches its chat template (issue 31, item 4): a preset's
`thinking = false` goes into the settings, from there into each request (a chat turn and
a compare's second model), across the worker pipe, and the MLX engine renders Qwen3's
empty think block for it; unset, the prompt is exactly what it was before. llama.cpp
passes it too, and the disk cache's next-turn render uses the same switch."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.kvdisk import QWEN3_THINKING
from core import presets
from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams, template_switches
from core.engines.kv_next_turn import reply_content
from core.engines.llamacpp import LlamaCppEngine
from core.engines.mlx import MlxEngine
from core.events import TextDelta, Usage
from core.runtime import Runtime
from core.runtime.compare import Comparison, start_compare
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.thinking_models import (
    EMPTY_THINK,
    QWEN3_SWITCH_TEMPLATE,
    build_thinking_model_dir,
)
from tests.fixtures.tools import gguf_with_template

pytestmark = pytest.mark.timeout(240)

HI = ({"role": "user", "content": "Hi"},)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlxEngine]:
    folder = build_thinking_model_dir(tmp_path_factory.mktemp("thinking"))
    loaded = MlxEngine(ModelSpec(str(folder), "mlx", context_size=1024,
                                 options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0))))
    yield loaded
    loaded.close()


def scripted(label: str) -> ModelSpec:
    opts = {"reply": "ok", "fixed_timing": True, "label": label}
    return ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(opts.items()))


def test_thinking_off_renders_the_empty_think_block_and_unset_renders_as_before(
        engine: MlxEngine) -> None:
    off = engine.render_text(GenerationRequest("r", HI, thinking=False))
    on = engine.render_text(GenerationRequest("r", HI, thinking=True))
    unset = engine.render_text(GenerationRequest("r", HI))
    assert off.endswith("<|im_start|>assistant\n" + EMPTY_THINK)
    assert "<think>" not in on and "<think>" not in unset
    assert on == unset and unset.endswith("<|im_start|>assistant\n")  # thinks by default


def test_a_template_without_the_switch_is_rendered_without_it() -> None:
    assert template_switches("{{ messages }}", False) == {}
    assert template_switches("{% if enable_thinking %}{% endif %}", None) == {}
    assert template_switches("{% if enable_thinking %}{% endif %}", False) == {"enable_thinking": False}


def test_the_switch_crosses_the_worker_pipe() -> None:
    # core.workers.protocol sends (GENERATE, request) pickled over a Connection
    request = GenerationRequest("r", HI, thinking=False)
    assert pickle.loads(pickle.dumps(request)).thinking is False


def test_config_reads_thinking_and_refuses_a_non_flag(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("thinking = false\n")
    assert Settings.load(config).thinking is False
    config.write_text('thinking = "no"\n')
    refused = Settings.load(config)
    assert refused.thinking is None and any("thinking" in p for p in refused.problems)


async def test_a_preset_with_thinking_off_reaches_the_chat_template(engine: MlxEngine) -> None:
    presets.save(presets.model_key(None, "left-model"), presets.Preset(thinking=False))
    rt = Runtime(Settings(), model_spec=scripted("left-model"))
    await rt.start()
    try:
        before = await rt.start_turn(None, "Hi")
        async for _ in before.events():  # the reply runs to its end (the model loaded)
            pass
        assert before.request.thinking is None
        assert EMPTY_THINK not in engine.render_text(before.request)

        applied = await rt.apply_preset()  # what a new chat with it does
        assert applied is not None and rt.settings.thinking is False
        turn = await rt.start_turn(None, "Hi")
        assert turn.request.thinking is False
        async for _ in turn.events():
            pass
        assert engine.render_text(turn.request).endswith(EMPTY_THINK)
    finally:
        await rt.close()


async def test_the_compared_model_answers_with_its_own_thinking_switch(
        engine: MlxEngine) -> None:
    presets.save(presets.model_key(None, "right-model"), presets.Preset(thinking=False))
    rt = Runtime(Settings(), model_spec=scripted("left-model"))
    await rt.start()
    try:
        comparison = await start_compare(rt, None, "Hi", scripted("right-model"), "right-model")
        assert isinstance(comparison, Comparison)
        async for _ in comparison.events():
            pass
        left, right = (side.request for side in comparison.sides)
        assert left.thinking is None and right.thinking is False
        assert engine.render_text(right).endswith(EMPTY_THINK)
        assert EMPTY_THINK not in engine.render_text(left)
        assert rt.settings.thinking is None  # the chat's settings stay
    finally:
        await rt.close()


def _prompt_tokens(engine: LlamaCppEngine, request: GenerationRequest) -> int:
    engine.submit(request)
    usage = None
    while engine.has_work():
        for _, events in engine.step():
            usage = next((e for e in events if isinstance(e, Usage)), usage)
    assert usage is not None
    return usage.prompt_tokens


def test_llamacpp_passes_the_switch_to_its_template(bundled_gguf: Path, tmp_path: Path) -> None:
    model = tmp_path / "switch.gguf"
    gguf_with_template(str(bundled_gguf), str(model), QWEN3_SWITCH_TEMPLATE)
    engine = LlamaCppEngine(ModelSpec(str(model), "llamacpp", context_size=512,
                                      options=(("kv_disk_gb", 0),)))
    try:
        sampling = SamplingParams(temperature=0.0, max_tokens=1)
        unset = _prompt_tokens(engine, GenerationRequest("a", HI, sampling))
        on = _prompt_tokens(engine, GenerationRequest("b", HI, sampling, thinking=True))
        off = _prompt_tokens(engine, GenerationRequest("c", HI, sampling, thinking=False))
        assert unset == on and off > on  # the empty think block's tokens
    finally:
        engine.close()


# SmolLM3's way: the switch writes "/think" or "/no_think" into the system turn, so the
# history the next turn renders carries it too; a next-turn render without the switch
# (which mlx_lm renders as enable_thinking false for a vocabulary without think tokens, as
# here) never matches a prompt rendered with it on.
_SYSTEM_LINE = "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
assert _SYSTEM_LINE in QWEN3_THINKING
SYSTEM_SWITCH_TEMPLATE = QWEN3_THINKING.replace(_SYSTEM_LINE, (
    "{{- '<|im_start|>' + message.role + '\\n' + message.content }}"
    "{%- if message.role == 'system' %}{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- ' /no_think' }}{%- else %}{{- ' /think' }}{%- endif %}{%- endif %}"
    "{{- '<|im_end|>' + '\\n' }}"))


def test_the_next_turn_cache_is_rendered_with_the_same_switch(tmp_path: Path) -> None:
    """A reply's cache is re-rendered the way the next turn renders it (core.engines.kv_mlx);
    with the switch set, that render must carry it too, or the next turn prefills the
    previous answer again."""
    from tokenizers import Tokenizer

    # no <think> token here: the forced reply's grammar writes it as plain text
    folder = build_model_dir(tmp_path / "smol", QWEN3_SHAPE, seed=3)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = SYSTEM_SWITCH_TEMPLATE
    config_path.write_text(json.dumps(config))
    engine = MlxEngine(ModelSpec(str(folder), "mlx", context_size=2048,
                                 options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0.05))))
    answer = "Red, green and blue; " + "one two three four five six seven eight nine ten " * 3
    answer_tokens = len(Tokenizer.from_file(str(folder / "tokenizer.json")).encode(answer).ids)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. Answer briefly. " * 25}]
    try:
        for turn in range(2):
            question = f"Question {turn}: count to ten, then name three colours."
            messages.append({"role": "user", "content": question})
            forced = f"<think>Turn {turn}: a count and colours.</think>{answer}"
            request = GenerationRequest(f"t{turn}", tuple(messages), SamplingParams(
                temperature=0.0, max_tokens=200, json_schema=json.dumps({"enum": [forced]})),
                thinking=True)
            assert " /think<|im_end|>" in engine.render_text(request)
            engine.submit(request)
            raw, usage = [], None
            while engine.has_work():  # to the end, then the idle steps (next-turn cache)
                for _, events in engine.step():
                    raw += [e.text for e in events if isinstance(e, TextDelta)]
                    usage = next((e for e in events if isinstance(e, Usage)), usage)
            assert usage is not None
            if turn:  # only the new question (and its frame) is prefilled, not the answer
                assert usage.prompt_tokens - usage.cached_tokens < answer_tokens, usage
            content = reply_content("".join(raw), "qwen3")
            assert content is not None and answer.strip() in content
            messages.append({"role": "assistant", "content": content})
    finally:
        engine.close()
