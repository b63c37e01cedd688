"""The bundled Gemma on llama.cpp under hostile input: text it cannot encode, prompts too
long to tokenise, and exact usage counts; through the pool (past the server's edge, as the
chat window sends) and through `llmdeck serve` with the openai client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta, Usage
from tests.fixtures.serve import ServerThread, served

pytestmark = pytest.mark.slow


def gemma(path: Path) -> ModelSpec:
    return ModelSpec(path=str(path), engine="llamacpp", context_size=1024)


def request(rid: str, content: str, max_tokens: int = 3) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": content},),
                             SamplingParams(temperature=0.0, max_tokens=max_tokens))


@pytest.fixture(scope="module")
def gemma_server(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(gemma(bundled_gguf), tmp_path_factory.mktemp("serve-gemma-home"),
                      settings=Settings(replicas=1), served_name="gemma")


def run(srv: ServerThread, req: GenerationRequest) -> list:
    """One request straight to the server's pool: past the HTTP edge, as the chat window sends."""
    async def collect() -> list:
        return [e async for e in srv.runtime.pool.generate(srv.runtime.model_key, req)]

    return srv.call(collect())


def test_lone_surrogates_reaching_the_engine_are_text_not_a_crash(gemma_server: ServerThread) -> None:
    [pid] = gemma_server.runtime.pool.pids()
    for i, text in enumerate(["\ud800", "a \udfff b", "\udbff\ud800", "x" * 50 + "\ud83d"]):
        events = run(gemma_server, request(f"s{i}", text, max_tokens=1))
        assert not [e for e in events if isinstance(e, Error)], events
        assert events[-1] in (Done("stop"), Done("length"))
    assert gemma_server.runtime.pool.pids() == [pid], "the worker must not have been restarted"
    assert gemma_server.runtime.pool.status()[0].restarts == 0


def test_a_huge_prompt_is_refused_by_the_engine_before_tokenising(gemma_server: ServerThread) -> None:
    started = time.monotonic()
    events = run(gemma_server, request("big", "word " * 2_000_000))  # 10 MB
    took = time.monotonic() - started
    assert isinstance(events[0], Error) and events[0].code == "CONTEXT_OVERFLOW"
    assert "is 10,000," in events[0].message and "1024 tokens" in events[0].message
    assert took < 5, took  # tokenising 10 MB takes llama.cpp over 10 s here


def test_usage_counts_the_tokens_generated_exactly(gemma_server: ServerThread) -> None:
    for n in (1, 4):
        events = run(gemma_server, request(f"n{n}", "Write a long story about a dragon.", n))
        [usage] = [e for e in events if isinstance(e, Usage)]
        assert events[-1] == Done("length")
        assert usage.completion_tokens == n  # was n + 1
        assert sum(isinstance(e, TextDelta) for e in events) >= 1


def test_usage_through_serve_is_exact_streaming_and_not(gemma_server: ServerThread) -> None:
    client = OpenAI(base_url=gemma_server.url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    reply = client.chat.completions.create(model="gemma", messages=messages, max_tokens=4, temperature=0)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 4
    chunks = list(client.chat.completions.create(model="gemma", messages=messages, max_tokens=4,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens


def test_a_30_mb_prompt_to_gemma_is_400_in_well_under_a_second_of_work(gemma_server: ServerThread) -> None:
    import openai

    client = OpenAI(base_url=gemma_server.url, api_key="x", max_retries=0, timeout=60)
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "a " * 15_000_000}])
    assert info.value.body["code"] == "context_length_exceeded"
    assert "1,024 tokens" in info.value.message
    assert time.monotonic() - started < 5  # it was 34 s of tokenising before the 400
    ok = client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert ok.choices[0].message.content is not None


def test_a_prompt_over_the_context_is_400_in_the_apis_terms(gemma_server: ServerThread) -> None:
    import openai

    client = OpenAI(base_url=gemma_server.url, api_key="x", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as info:  # 12,500 chars: tokenised, then too long
        client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "word " * 2500}])
    assert info.value.body["code"] == "context_length_exceeded"
    assert "context of 1024" in info.value.message
    assert "Send fewer or shorter messages" in info.value.message
    assert "new chat" not in info.value.message  # the chat window's advice, not an API client's


def test_the_stop_string_that_ended_a_reply_is_named_in_done(gemma_server: ServerThread) -> None:
    """llama.cpp's Done names the stop string that cut the reply (the Anthropic route's
    stop_sequence), among the engine's own (a turn marker) that it also watches."""
    def greedy(rid: str, stop: tuple[str, ...]) -> list:
        return run(gemma_server, GenerationRequest(
            rid, ({"role": "user", "content": "Count from one to twenty in words."},),
            SamplingParams(temperature=0.0, max_tokens=40, stop=stop)))

    free = greedy("free", ())
    text = "".join(e.text for e in free if isinstance(e, TextDelta))
    words = text.split()
    assert len(words) > 4, text
    word = words[len(words) // 2]
    stopped = greedy("cut", ("never in this reply", word))
    assert stopped[-1] == Done("stop", word), stopped[-1]
    # A base model's reply ends without the whitespace its cut leaves (ReplyTail, issue 48).
    assert "".join(e.text for e in stopped if isinstance(e, TextDelta)) == \
        text[:text.index(word)].rstrip()
    assert free[-1].stop_sequence != word
