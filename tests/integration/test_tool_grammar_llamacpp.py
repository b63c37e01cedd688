"""Tool calls under a grammar on the llama.cpp engine, through the openai client: the
bundled Gemma 3 270M with a Hermes-style tools template (tests/fixtures/tools.py), so the
engine detects the <tool_call> format. The 270M model does not call tools by itself;
tool_choice forces the opener and the grammar holds the rest to the offered schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from core.engines.base import ModelSpec
from tests.fixtures.serve import ServerThread, served
from tests.fixtures.tool_models import TOOLS, valid_arguments
from tests.fixtures.tools import GEMMA_TOOLS_TEMPLATE, gguf_with_template

pytestmark = pytest.mark.slow
ASK = [{"role": "user", "content": "What's the weather in Paris for the next three days?"}]


@pytest.fixture(scope="module")
def client(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    model = tmp_path_factory.mktemp("tools-gguf") / "gemma-tools.gguf"
    gguf_with_template(str(bundled_gguf), str(model), GEMMA_TOOLS_TEMPLATE)
    for srv in served(ModelSpec(str(model), "llamacpp", context_size=2048),
                      tmp_path_factory.mktemp("home"), served_name="gemma"):
        assert srv.runtime.model.info.get("family") == "hermes"
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)


def test_a_forced_call_fits_the_offered_schemas_on_every_seed(client: OpenAI) -> None:
    for seed in range(2):
        reply = client.chat.completions.create(
            model="gemma", messages=ASK, tools=list(TOOLS), tool_choice="required",
            max_tokens=80, temperature=1.0, seed=seed, stop=["</tool_call>"],  # no tail to wait for
            logit_bias={"107": -1})  # with a bias too (llama-cpp-python once dropped processors)
        [call, *_] = reply.choices[0].message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert valid_arguments(call.function.name, arguments), (seed, arguments)


def test_a_streamed_call_sends_its_arguments_as_deltas(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gemma", messages=ASK, tools=list(TOOLS), max_tokens=80, temperature=0.0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True,
        stop=["</tool_call>"])
    deltas = [tc for c in stream if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    first, rest = deltas[0], deltas[1:]
    assert first.id and first.function.name == "get_weather" and first.function.arguments == ""
    pieces = [d.function.arguments for d in rest if d.index == first.index]
    assert len(pieces) > 1
    assert valid_arguments("get_weather", json.loads("".join(pieces)))


LLAMA3_TEMPLATE = (GEMMA_TOOLS_TEMPLATE.replace("</tool_call>", "")
                   .replace("<tool_call>", "<|python_tag|>")
                   .replace('"arguments"', '"parameters"').replace("'arguments'", "'parameters'"))


def test_a_llama3_call_ends_at_the_end_token_and_fits(bundled_gguf: Path,
                                                      tmp_path_factory: pytest.TempPathFactory,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The Llama 3.1 format, which has no closer: the grammar ends the reply after the body."""
    model = tmp_path_factory.mktemp("llama3-gguf") / "gemma-llama3-tools.gguf"
    gguf_with_template(str(bundled_gguf), str(model), LLAMA3_TEMPLATE)
    monkeypatch.setenv("LLMDECK_HOME", str(tmp_path_factory.mktemp("home3")))
    srv = ServerThread(ModelSpec(str(model), "llamacpp", context_size=2048), served_name="gemma")
    try:
        assert srv.runtime.model.info.get("family") == "llama3"
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
        for seed in range(2):
            reply = client.chat.completions.create(
                model="gemma", messages=ASK, tools=list(TOOLS), tool_choice="required",
                max_tokens=80, temperature=1.0, seed=seed)
            [call] = reply.choices[0].message.tool_calls
            arguments = json.loads(call.function.arguments)
            assert valid_arguments(call.function.name, arguments), (seed, arguments)
            assert reply.choices[0].finish_reason == "tool_calls"
            assert reply.usage.completion_tokens < 80  # the end token came right after the body
    finally:
        srv.close()
