"""Tool calls through the official openai client against `llmdeck serve` on the tiny MLX
model whose template offers tools the Hermes way: tool_choice forces a call, the grammar
makes it valid, and a streamed call arrives as OpenAI-shaped argument deltas."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from core.engines.base import ModelSpec
from tests.fixtures.serve import served
from tests.fixtures.tool_models import ALARM, TOOLS, build_tool_model_dir, valid_arguments

ASK = [{"role": "user", "content": "Wake me at seven, loudly."}]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    model = build_tool_model_dir(tmp_path_factory.mktemp("tiny-tools"))
    spec = ModelSpec(str(model), "mlx", context_size=1024,
                     options=(("max_concurrency", 4), ("warmup_batch_sizes", (1, 2))))
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="tiny"):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=60)


def test_a_streamed_call_sends_its_arguments_as_deltas(client: OpenAI) -> None:
    for seed in (1, 2):
        stream = client.chat.completions.create(
            model="tiny", messages=ASK, tools=list(TOOLS), tool_choice="required",
            max_tokens=160, temperature=1.0, seed=seed, stream=True)
        chunks = list(stream)
        deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        first, rest = deltas[0], deltas[1:]
        assert first.id and first.type == "function" and first.function.arguments == ""
        assert first.function.name in ("get_weather", "set_alarm")
        pieces = [d.function.arguments for d in rest if d.index == first.index]
        assert len(pieces) > 1, "arguments arrive as they are decoded, not in one chunk"
        arguments = json.loads("".join(pieces))
        assert valid_arguments(first.function.name, arguments), arguments
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish in (["tool_calls"], ["length"])  # free text may run on after the call


def test_a_named_tool_choice_calls_that_tool_without_streaming(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model="tiny", messages=ASK, tools=list(TOOLS), max_tokens=160, temperature=1.0, seed=4,
        tool_choice={"type": "function", "function": {"name": "set_alarm"}})
    [call, *_] = reply.choices[0].message.tool_calls
    assert call.function.name == "set_alarm"
    assert valid_arguments("set_alarm", json.loads(call.function.arguments))


def test_bad_tool_choices_and_schemas_are_400s_that_say_why(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="not among the offered tools"):
        client.chat.completions.create(model="tiny", messages=ASK, tools=[ALARM], tool_choice={
            "type": "function", "function": {"name": "get_weather"}})
    with pytest.raises(openai.BadRequestError, match="needs 'tools'"):
        client.chat.completions.create(model="tiny", messages=ASK, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model="tiny", messages=ASK, tools=[ALARM], tool_choice="maybe")
    # a valid JSON schema (the server's check passes it) that the grammar cannot enforce: a
    # $ref to nothing; one that is not a schema at all is a 400 of its own
    # (test_serve_tools_schema.py)
    broken = {"type": "function", "function": {"name": "broken", "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}}}
    with pytest.raises(openai.BadRequestError, match="cannot be enforced"):
        client.chat.completions.create(model="tiny", messages=ASK, tools=[broken], max_tokens=4,
                                       tool_choice="required")
    free = client.chat.completions.create(model="tiny", messages=ASK, tools=[broken], max_tokens=4)
    assert free.choices[0].finish_reason == "length"  # left free, an odd schema is no error
    ok = client.chat.completions.create(model="tiny", messages=ASK, tools=[ALARM],
                                        tool_choice="required", max_tokens=160, seed=5,
                                        temperature=1.0)
    assert ok.choices[0].message.tool_calls[0].function.name == "set_alarm"
