"""The tiny MLX model behind `llmdeck serve` under hostile input: exact usage counts, and
text or tool calls its tokenizer or template cannot take fail that request only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread, served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mlx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    model = build_model_dir(Path(tmp_path_factory.mktemp("tiny")) / "tiny-qwen3", QWEN3_SHAPE)
    spec = ModelSpec(str(model), "mlx", context_size=512,
                     options=(("max_concurrency", 4), ("warmup_batch_sizes", (1,)), ("label", "tiny")))
    yield from served(spec, tmp_path_factory.mktemp("serve-mlx-hostile-home"), served_name="tiny")


def run(srv: ServerThread, req: GenerationRequest) -> list:
    async def collect() -> list:
        return [e async for e in srv.runtime.pool.generate(srv.runtime.model_key, req)]

    return srv.call(collect())


def test_usage_is_exact_at_length_streaming_and_not(mlx_server: ServerThread) -> None:
    client = OpenAI(base_url=mlx_server.url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "Count to one hundred."}]
    for n in (1, 7):
        reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=n,
                                               temperature=0)
        if reply.choices[0].finish_reason == "length":
            assert reply.usage.completion_tokens == n
        else:  # the random model said its end token first: counted with the reply
            assert reply.usage.completion_tokens <= n
        chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=n,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True}))
        assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_input_the_tokenizer_or_template_cannot_take_fails_that_request_only(mlx_server: ServerThread) -> None:
    [pid] = mlx_server.runtime.pool.pids()
    hostile = [
        ({"role": "user", "content": "a \ud800 b"},),  # past the HTTP edge, as the chat window sends
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 5, "arguments": 5}}]},
         {"role": "user", "content": "hi"}),
        ({"role": "user", "content": {"not": "text"}},),
    ]
    for i, messages in enumerate(hostile):
        events = run(mlx_server, GenerationRequest(f"h{i}", messages, SamplingParams(max_tokens=2)))
        assert events[-1] in (Done("stop"), Done("length"), Done("error")), events
        errors = [e for e in events if isinstance(e, Error)]
        assert all(e.code == "BAD_REQUEST" for e in errors), errors
    assert mlx_server.runtime.pool.pids() == [pid]
    assert mlx_server.runtime.pool.status()[0].restarts == 0
    client = OpenAI(base_url=mlx_server.url, api_key="x", max_retries=0)
    assert client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=2).choices
