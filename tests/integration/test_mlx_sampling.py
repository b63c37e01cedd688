"""MlxEngine's per-request sampling on a small random-weight qwen3: seeds, penalties,
logit_bias and logprobs, alone and inside a batch of requests with other settings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.mlx import MlxEngine
from core.events import Done, Error, Logprobs, TextDelta, Usage
from tests.fixtures.engines import run_requests
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path: Path = build_model_dir(tmp_path_factory.mktemp("qwen3-sampling"), QWEN3_SHAPE,
                                 logit_scale=0.5)  # close logits: penalties change the reply
    spec = ModelSpec(str(path), "mlx", context_size=2048,
                     options=(("max_concurrency", 8), ("warmup_batch_sizes", (1, 2))))
    eng = MlxEngine(spec)
    yield eng
    eng.close()


def ask(text: str, rid: str, **sampling) -> GenerationRequest:
    sp = SamplingParams(**{"temperature": 0.0, "max_tokens": 12, **sampling})
    return GenerationRequest(rid, ({"role": "user", "content": text},), sp)


def run(engine: MlxEngine, *requests: GenerationRequest) -> dict[str, list]:
    engine._prefix.clear()  # every request prefills: nothing rides on an earlier test
    return run_requests(engine, *requests)


def text_of(evs: list) -> str:
    return "".join(e.text for e in evs if isinstance(e, TextDelta))


def strangers(n: int) -> list[GenerationRequest]:
    """Requests with other settings to share a batch with."""
    return [ask(f"Something else entirely, number {i}", f"other{i}", temperature=0.9,
                max_tokens=15 + i) for i in range(n)]


def test_a_seeded_request_gives_the_same_tokens_alone_and_inside_a_batch(engine):
    hot = {"temperature": 1.5, "top_p": 0.95, "max_tokens": 16}
    alone = text_of(run(engine, ask("Tell me a story", "s", seed=1234, **hot))["s"])
    again = text_of(run(engine, ask("Tell me a story", "s", seed=1234, **hot))["s"])
    assert again == alone
    batched = run(engine, *strangers(2), ask("Tell me a story", "s", seed=1234, **hot),
                  *strangers(3)[2:])
    assert text_of(batched["s"]) == alone
    other_seed = text_of(run(engine, ask("Tell me a story", "s", seed=99, **hot))["s"])
    assert other_seed != alone  # the seed, not the prompt, decides


def test_logit_bias_forces_and_forbids_tokens_on_both_paths(engine):
    def biased(rid: str, bias: tuple) -> GenerationRequest:
        return ask("Hello there", rid, logit_bias=bias, max_tokens=5)

    def spelled(token: int) -> str:
        return engine._tokenizer.decode([token] * 5).strip()

    forced = run(engine, biased("f", ((300, 100.0), (301, 90.0))))["f"]
    assert forced[-2].completion_tokens == 5
    assert text_of(forced).strip() == spelled(300)
    banned = run(engine, *strangers(2), biased("b", ((300, -100.0), (301, 90.0))))["b"]
    assert text_of(banned).strip() == spelled(301)
    in_batch = run(engine, *strangers(2), biased("f", ((300, 100.0), (301, 90.0))))["f"]
    assert text_of(in_batch).strip() == spelled(300)


def test_a_logit_bias_outside_the_vocabulary_is_a_bad_request(engine):
    evs = run(engine, ask("Hi", "x", logit_bias=((10**6, 1.0),)))["x"]
    assert isinstance(evs[0], Error) and evs[0].code == "BAD_REQUEST"
    assert "vocabulary has 512 tokens" in evs[0].message
    assert evs[-1] == Done("error")


@pytest.mark.parametrize("penalty", [
    {"presence_penalty": 1.5, "presence_context_size": 8},
    {"frequency_penalty": 2.0, "frequency_context_size": 32},
    {"repetition_penalty": 1.8, "repetition_context_size": 16},
])
def test_penalties_match_mlx_lm_and_agree_between_single_and_batch(engine, penalty):
    from mlx_lm import generate
    from mlx_lm.sample_utils import make_logits_processors

    # A small bias makes one token the favourite, so without a penalty it repeats.
    req = ask("one one one one one", "pen", max_tokens=14, logit_bias=((300, 1.0),), **penalty)
    prompt = engine.render_prompt(req)
    expected = generate(engine._model, engine._tokenizer, prompt=prompt, max_tokens=14,
                        logits_processors=make_logits_processors({300: 1.0}, **penalty))
    plain = generate(engine._model, engine._tokenizer, prompt=prompt, max_tokens=14,
                     logits_processors=make_logits_processors({300: 1.0}))
    assert expected != plain  # the penalty changes this reply, so the comparison means something
    assert text_of(run(engine, req)["pen"]) == expected
    assert text_of(run(engine, *strangers(3), req)["pen"]) == expected


def test_logprobs_with_top_alternatives_alone_and_in_a_batch(engine):
    req = ask("Count to five", "lp", logprobs=True, top_logprobs=5, max_tokens=8)
    alone = run(engine, req)["lp"]
    entries = [e for ev in alone if isinstance(ev, Logprobs) for e in ev.content]
    usage = next(e for e in alone if isinstance(e, Usage))
    assert len(entries) == usage.completion_tokens  # greedy to max_tokens: no end token
    assert "".join(e["token"] for e in entries).strip() == text_of(alone).strip()
    for e in entries:
        tops = [t["logprob"] for t in e["top_logprobs"]]
        assert len(tops) == 5 and tops == sorted(tops, reverse=True)
        assert e["logprob"] == pytest.approx(tops[0], abs=1e-5)  # greedy takes the best
        assert e["logprob"] <= 0 and sum(math.exp(t) for t in tops) <= 1 + 1e-4
        assert bytes(e["bytes"]).decode() == e["token"]
    batched = run(engine, *strangers(3), req)["lp"]
    again = [e for ev in batched if isinstance(ev, Logprobs) for e in ev.content]
    assert [e["token"] for e in again] == [e["token"] for e in entries]
    assert [e["logprob"] for e in again] == pytest.approx([e["logprob"] for e in entries], abs=1e-3)


def test_sampled_logprobs_belong_to_the_sampled_tokens(engine):
    req = ask("Tell me a story", "hot", temperature=1.3, seed=7, logprobs=True, max_tokens=10)
    evs = run(engine, *strangers(2), req)["hot"]
    entries = [e for ev in evs if isinstance(ev, Logprobs) for e in ev.content]
    assert "".join(e["token"] for e in entries).strip() == text_of(evs).strip()
    assert all(e["top_logprobs"] == [] for e in entries)


PERSON = json.dumps({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "maximum": 150},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": False})


def test_a_json_schema_is_enforced_while_decoding_beside_unconstrained_rows(engine):
    plain = text_of(run(engine, ask("Describe a person", "free", max_tokens=40))["free"])
    with pytest.raises(ValueError):
        json.loads(plain)  # the random model writes no JSON by itself
    reqs = [ask("Describe a person", f"json{i}", json_schema=PERSON, max_tokens=120,
                **({"temperature": 1.0, "seed": i} if i else {})) for i in range(3)]
    others = [ask(f"Something else, number {i}", f"g{i}", max_tokens=20) for i in range(3)]
    events = run(engine, *others, *reqs)
    for r in reqs:
        evs = events[r.request_id]
        assert evs[-1] == Done("stop"), (r.request_id, text_of(evs))  # the grammar ended it
        value = json.loads(text_of(evs))
        assert set(value) == {"name", "age", "pets"} and isinstance(value["age"], int)
        assert len(value["name"]) <= 12 and set(value["pets"]) <= {"cat", "dog"}
    for other in others:  # unconstrained rows of the same batch decode as they would alone
        assert text_of(events[other.request_id]) == text_of(run(engine, other)[other.request_id])


def test_an_unusable_schema_is_a_bad_request(engine):
    evs = run(engine, ask("Hi", "bad", json_schema='{"type": "object", "minProperties": "x"}'))["bad"]
    assert isinstance(evs[0], Error) and evs[0].code == "BAD_REQUEST"
    assert "JSON schema" in evs[0].message


def test_constrained_rows_decode_the_same_alone_and_masked_together_in_a_batch(engine):
    # Alone, a row is masked by its own processor call; in a batch, every constrained row
    # by one shared mask (core.engines.grammar.mask_rows), behind per-row penalties.
    reqs = [ask("Describe a person", "greedy", json_schema=PERSON, max_tokens=60),
            ask("Describe a person", "seeded", json_schema=PERSON, max_tokens=60,
                temperature=1.0, seed=7),
            ask("Describe a pet", "penalised", json_schema=PERSON, max_tokens=60,
                frequency_penalty=0.8, logit_bias=((5, 3.0),))]
    alone = {r.request_id: text_of(run(engine, r)[r.request_id]) for r in reqs}
    together = run(engine, *strangers(3), *reqs)
    for r in reqs:
        assert together[r.request_id][-1] == Done("stop"), r.request_id
        assert text_of(together[r.request_id]) == alone[r.request_id], r.request_id
        assert set(json.loads(alone[r.request_id])) == {"name", "age", "pets"}
