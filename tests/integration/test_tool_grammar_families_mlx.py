"""Tool calls under a grammar on the MLX engine for the JSON families besides Hermes: Llama
3.1 (`<|python_tag|>{"name", "parameters"}`) and Mistral v3 (`[TOOL_CALLS][{..}]`), whose
call ends the message, and Kimi K2 (`functions.name:N<|tool_call_argument_begin|>{..}`).
The tiny random-weight model writes nothing sensible by itself, so a call that the family's
own parser reads as valid can only come from the grammar."""

from __future__ import annotations

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.mlx import MlxEngine
from core.events import ToolCall
from core.parsing import StreamParser
from tests.fixtures.tool_models import TOOLS, build_tool_model_dir, valid_arguments
from tests.integration.test_tool_grammar_mlx import WEATHER_Q, run, text_of

SEEDS = range(6)
OPENERS = {"llama3": "<|python_tag|>", "mistral": "[TOOL_CALLS]",
           "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>"}


@pytest.fixture(scope="module", params=sorted(OPENERS))
def engine(request, tmp_path_factory):
    path = build_tool_model_dir(tmp_path_factory.mktemp(f"tiny-{request.param}"),
                                family=request.param)
    eng = MlxEngine(ModelSpec(str(path), "mlx", context_size=1024,
                              options=(("max_concurrency", 8), ("warmup_batch_sizes", (1,)))))
    eng.family = request.param
    yield eng
    eng.close()


def calls_in(family: str, text: str) -> list[ToolCall]:
    parser = StreamParser(family)
    return [e for e in parser.feed(text) + parser.finish() if isinstance(e, ToolCall)]


def valid(call: ToolCall) -> bool:
    return call.error is None and valid_arguments(call.name, call.arguments)


def ask(rid: str, seed: int, **kw) -> GenerationRequest:
    sp = SamplingParams(temperature=1.0, seed=seed, max_tokens=200)
    return GenerationRequest(rid, WEATHER_Q, sp, tools=TOOLS, **kw)


def test_a_forced_call_parses_and_fits_the_schemas_on_every_seed(engine):
    family = engine.family
    assert engine._tool_grammars.format is not None  # the template made it this family
    events = run(engine, *[ask(f"s{seed}", seed, tool_choice="required") for seed in SEEDS])
    for seed in SEEDS:
        text = text_of(events[f"s{seed}"])
        assert text.startswith(OPENERS[family]), text
        calls = calls_in(family, text)
        assert calls and all(valid(c) for c in calls), text
        if family != "kimi":  # a call that ends the message: the end token came next
            assert events[f"s{seed}"][-1].finish_reason == "stop", text


def test_without_the_grammar_the_same_opener_gives_no_valid_call(engine):
    """The baseline: the prompt ends in the opener and nothing constrains the rest."""
    family, acts = engine.family, []
    for seed in SEEDS:
        req = ask(f"free{seed}", seed)
        prompt = engine.render_prompt(req) + engine._tokenizer.encode(
            OPENERS[family], add_special_tokens=False)
        acts.append(engine._admit(GenerationRequest(req.request_id, req.messages, req.sampling),
                                  prompt=prompt))
    events = run(engine, *acts)
    for seed in SEEDS:
        text = OPENERS[family] + text_of(events[f"free{seed}"])
        assert not any(valid(c) for c in calls_in(family, text)), text
