"""A forced tool_choice on a model with no call format of its own: the bundled base Gemma.

It used to be a 400 ("this model's tool-call format cannot be forced"). As llama.cpp's
server does for any model, the reply is now held to one bare JSON call object
({"name": <an offered tool>, "arguments": <its schema>}) and read as a tool call. On
llama.cpp through the real server and the official openai client; on MLX (the model's
import) through a real worker, where the worker's reader turns the JSON into a ToolCall.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, TextDelta, ToolCall
from core.workers.pool import WorkerPool
from tests.fixtures.bundled_engines import bundled_mlx  # noqa: F401
from tests.fixtures.serve import served
from tests.fixtures.tool_models import TOOLS, valid_arguments

pytestmark = pytest.mark.slow  # the real model: a few calls of ~20 tokens

ASK = [{"role": "user", "content": "Wake me at seven tomorrow, loudly please."}]


@pytest.fixture(scope="module")
def client(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    spec = ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024)
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="gemma"):
        assert srv.runtime.model.info["base_model"] is True
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)


def test_llamacpp_forced_calls_are_well_formed_tool_calls(client: OpenAI) -> None:
    # One "required" and one named call: each costs ~1 s a token on 2 cores (llama.cpp's
    # JSON grammar walks the whole 262k vocabulary), and the two cover both choices.
    for choice, seed in (("required", 1),
                         ({"type": "function", "function": {"name": "get_weather"}}, 3)):
        reply = client.chat.completions.create(
            model="gemma", messages=ASK, tools=list(TOOLS), tool_choice=choice,
            max_tokens=48, temperature=0.8, seed=seed)
        choice_out = reply.choices[0]
        assert choice_out.finish_reason == "tool_calls", choice_out
        [call] = choice_out.message.tool_calls
        assert not choice_out.message.content
        arguments = json.loads(call.function.arguments)
        assert valid_arguments(call.function.name, arguments), (call.function.name, arguments)
        if isinstance(choice, dict):
            assert call.function.name == "get_weather"
    # left free, the base model just answers (nothing is forced on it)
    free = client.chat.completions.create(model="gemma", messages=ASK, tools=list(TOOLS),
                                          max_tokens=8, temperature=0)
    assert free.choices[0].finish_reason in ("stop", "length")


async def test_mlx_forced_calls_are_read_as_tool_calls(bundled_mlx: Path) -> None:  # noqa: F811
    pool = WorkerPool()
    try:
        await pool.load("m", ModelSpec(str(bundled_mlx), "mlx", context_size=1024,
                                       options=(("warmup_batch_sizes", (1,)),)))
        for name, seed in (("set_alarm", 2),):  # one short call: ~1 s a token on 2 busy cores
            request = GenerationRequest(
                f"r{seed}", tuple(ASK), SamplingParams(temperature=0.8, max_tokens=48, seed=seed),
                tools=TOOLS, tool_choice="required", tool_name=name)
            events = [e async for e in pool.generate("m", request)]
            calls = [e for e in events if isinstance(e, ToolCall)]
            assert events[-1] == Done("stop"), events
            assert not "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
            [call] = calls
            assert call.error is None and valid_arguments(call.name, call.arguments), call
            assert name is None or call.name == name
    finally:
        await pool.shutdown()
