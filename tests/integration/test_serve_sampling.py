"""Sampling parameters through the official openai client against real servers: the tiny
MLX fixture model (penalties, logit_bias, seed, min_p/top_k, logprobs streamed and not) and
the bundled Gemma on llama.cpp (its native penalties, bias, seed and grammar; logprobs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from core.config import Settings
from core.engines.base import ModelSpec
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import served

HI = [{"role": "user", "content": "Tell me a story about a cat."}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    model = build_model_dir(tmp_path_factory.mktemp("tiny-sampling"), QWEN3_SHAPE)
    spec = ModelSpec(str(model), "mlx", context_size=512,
                     options=(("max_concurrency", 8), ("warmup_batch_sizes", (1, 2))))
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="tiny"):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=60)


def test_mlx_logprobs_with_top_alternatives_parse_in_the_sdk(tiny: OpenAI) -> None:
    reply = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=6, temperature=0,
                                         logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 6
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-5)
        assert entry.bytes == list(entry.token.encode())
    plain = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=6, temperature=0)
    assert plain.choices[0].logprobs is None


def test_mlx_logprobs_stream_in_chunks_the_sdk_reads(tiny: OpenAI) -> None:
    stream = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=5, temperature=0,
                                          logprobs=True, top_logprobs=2, stream=True)
    entries, text = [], ""
    for chunk in stream:
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        if choice.logprobs is not None:
            entries += choice.logprobs.content
    assert len(entries) == 5 and all(len(e.top_logprobs) == 2 for e in entries)
    assert "".join(e.token for e in entries).strip() == text.strip()


def test_mlx_seed_repeats_and_other_parameters_are_honoured(tiny: OpenAI) -> None:
    def ask(**kw) -> str:
        return tiny.chat.completions.create(model="tiny", messages=HI,
                                            **{"max_tokens": 12, **kw}).choices[0].message.content

    hot = {"temperature": 1.5}
    assert ask(seed=5, **hot) == ask(seed=5, **hot)
    assert ask(seed=5, **hot) != ask(seed=6, **hot)
    forced = ask(temperature=0, logit_bias={"300": 100}, max_tokens=4)
    assert forced.split() == [forced.split()[0]] * 4  # one token, four times
    greedy = ask(temperature=0)
    penalised = ask(temperature=0, frequency_penalty=2.0, presence_penalty=-2.0,
                    extra_body={"frequency_context_size": 16, "presence_context_size": 16})
    assert isinstance(penalised, str)
    assert ask(temperature=0, extra_body={"top_k": 1, "min_p": 0.5}) == greedy
    assert ask(temperature=1.0, seed=1, extra_body={"top_k": 1}) == greedy  # top-1 is argmax


def test_mlx_logit_bias_outside_the_vocabulary_is_400(tiny: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        tiny.chat.completions.create(model="tiny", messages=HI, logit_bias={"999999": 5})
    assert "vocabulary has 512 tokens" in info.value.message


PET = {"type": "object", "properties": {"animal": {"enum": ["cat", "dog"]},
                                        "legs": {"type": "integer"}},
       "required": ["animal", "legs"], "additionalProperties": False}
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "strict": True, "schema": PET}}


def is_pet(text: str) -> bool:
    value = json.loads(text)
    return set(value) == {"animal", "legs"} and value["animal"] in ("cat", "dog") \
        and isinstance(value["legs"], int)


def test_mlx_structured_output_streamed_and_not(tiny: OpenAI) -> None:
    reply = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=60,
                                         temperature=0, response_format=PET_FORMAT)
    assert reply.choices[0].finish_reason == "stop" and is_pet(reply.choices[0].message.content)
    stream = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=60, seed=3,
                                          temperature=1.0, response_format=PET_FORMAT, stream=True)
    assert is_pet("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    anything = tiny.chat.completions.create(model="tiny", messages=HI, max_tokens=60, temperature=0,
                                            response_format={"type": "json_object"})
    content = anything.choices[0].message.content
    assert anything.choices[0].finish_reason == "length" or isinstance(json.loads(content), dict)
    assert content.startswith("{")


@pytest.fixture(scope="module")
def gemma(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    spec = ModelSpec(path=str(bundled_gguf), engine="llamacpp", context_size=1024)
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="gemma",
                      settings=Settings(replicas=1)):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)


@pytest.mark.slow
def test_llamacpp_native_penalties_bias_and_seed(gemma: OpenAI) -> None:
    def ask(**kw) -> str:
        return gemma.chat.completions.create(model="gemma",
                                             **{"messages": HI, "max_tokens": 10, **kw}).choices[0].message.content

    def seeded(seed: int) -> str:
        # From the same KV state: llama.cpp's reuse of a cached prefix changes the logits'
        # last bits, which a hot sample can notice; a greedy request in between resets it.
        gemma.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "Hi"}],
                                      max_tokens=2, temperature=0)
        return ask(seed=seed, temperature=1.2)

    assert seeded(11) == seeded(11)
    # llama.cpp counts the reply's own tokens: a list repeats its commas.
    # The list is begun in the prompt: "List the numbers from 1 to 20" alone gave a list or
    # prose depending on the last bits of a reused prefix (and the llama.cpp build).
    count = [{"role": "user", "content": "Continue the list up to 20: 1, 2, 3, 4, 5, 6,"}]
    greedy = ask(temperature=0, max_tokens=20, messages=count)
    assert greedy.count(",") >= 3, greedy
    penalised = ask(temperature=0, max_tokens=20, messages=count, frequency_penalty=2.0)
    assert penalised.count(",") < greedy.count(","), (greedy, penalised)
    forced = ask(temperature=0, max_tokens=4, logit_bias={"10000": 100})
    assert forced and forced == forced[: len(forced) // 4] * 4  # one token, four times
    scored = gemma.chat.completions.create(model="gemma", messages=HI, max_tokens=6, temperature=0,
                                           logprobs=True, top_logprobs=4)
    content = scored.choices[0].logprobs.content
    assert len(content) == scored.usage.completion_tokens == 6
    assert "".join(e.token for e in content).strip() == scored.choices[0].message.content
    assert all(len(e.top_logprobs) == 4 and e.logprob <= 0 for e in content)
    assert all(e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob for e in content)
    stream = gemma.chat.completions.create(model="gemma", messages=HI, max_tokens=4, temperature=0,
                                           logprobs=True, stream=True)
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content[:4]]
    with pytest.raises(openai.BadRequestError) as info:
        ask(temperature=0, frequency_penalty=1.0, presence_penalty=1.0,
            extra_body={"frequency_context_size": 8, "presence_context_size": 16})
    assert "one look-back window" in info.value.message
    pet = gemma.chat.completions.create(model="gemma", messages=HI, max_tokens=40, temperature=0,
                                        response_format=PET_FORMAT)
    assert is_pet(pet.choices[0].message.content)
