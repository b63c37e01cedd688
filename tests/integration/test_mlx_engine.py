"""MlxEngine on small random-weight qwen3 and llama folders: batching, stops, cancel, cache."""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.mlx import MlxEngine
from core.events import Done, Error, TextDelta, Usage
from tests.fixtures.mlx_models import LLAMA_SHAPE, QWEN3_SHAPE, build_model_dir


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def model_dir(request, tmp_path_factory) -> Path:
    shape = QWEN3_SHAPE if request.param == "qwen3" else LLAMA_SHAPE
    return build_model_dir(tmp_path_factory.mktemp(request.param), shape)


@pytest.fixture(scope="module")
def engine(model_dir):
    spec = ModelSpec(
        str(model_dir),
        "mlx",
        context_size=2048,
        options=(("max_concurrency", 8), ("warmup_batch_sizes", (1, 2))),
    )
    eng = MlxEngine(spec)
    yield eng
    eng.close()


def ask(text: str, rid: str, **sampling) -> GenerationRequest:
    sp = SamplingParams(**{"temperature": 0.0, "max_tokens": 16, **sampling})
    return GenerationRequest(rid, ({"role": "user", "content": text},), sp)


def drain(engine, cancel: dict[str, int] | None = None) -> dict[str, list]:
    """Step until idle; cancel request ids once they have streamed N deltas."""
    events: dict[str, list] = defaultdict(list)
    cancel = dict(cancel or {})
    while engine.has_work():
        for rid, evs in engine.step():
            events[rid].extend(evs)
            deltas = sum(isinstance(e, TextDelta) for e in events[rid])
            if rid in cancel and deltas >= cancel[rid]:
                engine.cancel(rid)
                del cancel[rid]
    return events


def text_of(evs) -> str:
    return "".join(e.text for e in evs if isinstance(e, TextDelta))


def done_of(evs) -> str:
    assert isinstance(evs[-1], Done), evs[-1]
    assert isinstance(evs[-2], Usage)
    return evs[-1].finish_reason


def test_greedy_single_stream_equals_mlx_lm_generate(engine):
    from mlx_lm import generate

    req = ask("Hello, how are you today?", "g1", max_tokens=12)
    prompt = engine.render_prompt(req)
    expected = generate(engine._model, engine._tokenizer, prompt=prompt, max_tokens=12)
    engine.submit(req)
    evs = drain(engine)["g1"]
    assert text_of(evs) == expected
    usage = evs[-2]
    assert usage.prompt_tokens == len(prompt)
    assert usage.completion_tokens == 12
    assert done_of(evs) == "length"


def test_greedy_in_a_batch_equals_single_stream(engine):
    prompts = [f"Count to ten, take {i}." for i in range(3)]
    alone = []
    for i, p in enumerate(prompts):
        engine.submit(ask(p, f"a{i}"))
        alone.append(text_of(drain(engine)[f"a{i}"]))
    engine._prefix.clear()
    for i, p in enumerate(prompts):
        engine.submit(ask(p, f"b{i}"))
    events = drain(engine)
    assert [text_of(events[f"b{i}"]) for i in range(3)] == alone


def test_batch_drained_to_one_request_goes_back_to_the_single_path(engine):
    alone = ask("A conversation has a user", "alone", max_tokens=14, repetition_penalty=1.2)
    engine.submit(alone)
    expected = text_of(drain(engine)["alone"])
    engine._prefix.clear()
    engine.submit(ask("A conversation has a user", "last", max_tokens=14, repetition_penalty=1.2))
    engine.submit(ask("Hello", "short", max_tokens=2))
    events: dict[str, list] = defaultdict(list)
    went_single = False
    while engine.has_work():
        for rid, evs in engine.step():
            events[rid].extend(evs)
        if "short" in events and not engine._batch and engine._single is not None:
            went_single = True
    assert went_single
    assert done_of(events["short"]) == "length"
    assert text_of(events["last"]) == expected
    assert events["last"][-2].completion_tokens == 14


def test_batch_of_eight_mixed_sampling_stops_and_lengths(engine):
    engine.submit(ask("The quick brown fox", "probe", max_tokens=12))
    full = text_of(drain(engine)["probe"])
    stop = full[4:7]
    cut = full.find(stop)
    assert stop and cut >= 0

    reqs = [
        ask("The quick brown fox", "stop", max_tokens=12, stop=(stop,)),
        ask("The quick brown fox", "len3", max_tokens=3),
        ask("Count to ten", "hot", temperature=1.2, top_p=0.9, seed=3, max_tokens=9),
        ask("Count to ten", "topk", temperature=0.8, top_k=5, max_tokens=7),
        ask("def main():", "minp", temperature=0.7, min_p=0.1, max_tokens=5),
        ask("Hello", "rep", repetition_penalty=1.3, max_tokens=11),
        ask("A conversation", "long", max_tokens=20),
        ask("Numbers", "one", max_tokens=1),
    ]
    for r in reqs:
        engine.submit(r)
    events = drain(engine)
    assert set(events) == {r.request_id for r in reqs}
    assert text_of(events["stop"]) == full[:cut]
    assert done_of(events["stop"]) == "stop"
    for r in reqs[1:]:
        evs = events[r.request_id]
        reason = done_of(evs)
        usage = evs[-2]
        if reason == "length":
            assert usage.completion_tokens == r.sampling.max_tokens
        else:  # the model may emit its end-of-turn token early
            assert reason == "stop" and usage.completion_tokens <= r.sampling.max_tokens
    assert done_of(events["long"]) in ("length", "stop")
    assert events["one"][-2].completion_tokens == 1


def test_cancel_mid_stream_frees_the_slot(engine):
    engine.submit(ask("The quick brown fox", "c1", max_tokens=200))
    engine.submit(ask("Hello", "c2", max_tokens=6))
    events = drain(engine, cancel={"c1": 2})
    assert done_of(events["c1"]) == "cancelled"
    assert events["c1"][-2].completion_tokens < 200
    assert done_of(events["c2"]) == "length"
    assert not engine.has_work()
    assert not engine._batch and engine._single is None


def test_single_request_joins_a_batch_without_losing_tokens(engine):
    engine.submit(ask("Hello there", "solo", max_tokens=10))
    alone = text_of(drain(engine)["solo"])
    engine._prefix.clear()
    engine.submit(ask("Hello there", "s1", max_tokens=10))
    events: dict[str, list] = defaultdict(list)
    for _ in range(3):  # s1 runs alone a few steps, then s2 arrives
        for rid, evs in engine.step():
            events[rid].extend(evs)
    engine.submit(ask("Count", "s2", max_tokens=4))
    for rid, evs in drain(engine).items():
        events[rid].extend(evs)
    assert text_of(events["s1"]) == alone
    assert done_of(events["s2"]) == "length"


def test_second_turn_reuses_the_first_turns_cache(engine):
    history = [{"role": "user", "content": "Tell me about local language models."}]
    first = GenerationRequest("t1", tuple(history), SamplingParams(temperature=0.0, max_tokens=24))
    engine.submit(first)
    evs = drain(engine)["t1"]
    u1 = evs[-2]
    history += [
        {"role": "assistant", "content": text_of(evs)},
        {"role": "user", "content": "And why?"},
    ]
    second = GenerationRequest("t2", tuple(history), SamplingParams(temperature=0.0, max_tokens=4))
    engine.submit(second)
    u2 = drain(engine)["t2"][-2]
    slack = 4  # end-of-turn tokens the template writes differently from the model
    assert u2.cached_tokens >= u1.prompt_tokens + u1.completion_tokens - slack
    assert u2.cached_tokens < u2.prompt_tokens


def test_a_lone_regenerate_and_edit_take_the_cache_and_stay_exact(engine):
    """A lone regenerate or edit takes the stored cache itself, trimmed to the fork, and
    writes over the old branch's tail: each reply must still be what a cold run gives,
    and going back to continue the old branch must be exact too."""
    from mlx_lm import generate

    def run(rid: str, messages: list[dict], max_tokens: int = 8) -> tuple[str, Usage, str]:
        req = GenerationRequest(rid, tuple(messages), SamplingParams(temperature=0.0, max_tokens=max_tokens))
        ids = engine.render_prompt(req)
        expected = generate(engine._model, engine._tokenizer, prompt=ids, max_tokens=max_tokens)
        engine.submit(req)
        evs = drain(engine)[rid]
        return text_of(evs), evs[-2], expected

    turn1 = [{"role": "system", "content": "You answer briefly about foxes and dogs."},
             {"role": "user", "content": "Tell me about the quick brown fox"}]
    reply1, _, _ = run("f1", turn1)
    turn2 = turn1 + [{"role": "assistant", "content": reply1},
                     {"role": "user", "content": "And the lazy dog?"}]
    reply2, u2, expected = run("f2", turn2)
    assert reply2 == expected and u2.cached_tokens > 0
    again, ur, expected = run("regen", turn2)
    assert again == expected == reply2
    assert ur.cached_tokens == ur.prompt_tokens - 1, "all but the one token left to feed"
    edited = turn2[:-1] + [{"role": "user", "content": "What do foxes eat in winter?"}]
    text, ue, expected = run("edit", edited)
    assert text == expected
    assert ue.cached_tokens >= u2.cached_tokens - 2, "the history before the edited turn"
    back = turn2 + [{"role": "assistant", "content": reply2}, {"role": "user", "content": "Why?"}]
    text, ub, expected = run("back", back)
    assert text == expected and 0 < ub.cached_tokens < ub.prompt_tokens


def test_prompt_over_context_is_refused_with_a_sentence(model_dir):
    spec = ModelSpec(str(model_dir), "mlx", context_size=16, options=(("warmup_batch_sizes", ()),))
    eng = MlxEngine(spec)
    eng.submit(ask("word " * 40, "big"))
    evs = drain(eng)["big"]
    assert isinstance(evs[0], Error) and evs[0].code == "CONTEXT_OVERFLOW"
    assert "context of 16" in evs[0].message
    assert evs[-1] == Done("error")
    eng.close()


def test_info_reports_template_and_context(engine):
    info = engine.info()
    assert info["context_size"] == 2048
    assert info["model_type"] in ("qwen3", "llama")
    assert "<|im_start|>" in info["chat_template"]


def test_turns_that_finished_together_in_a_batch_are_reused_exactly(engine):
    from mlx_lm import generate

    convs = [
        [{"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "Tell me a much longer story about a fox, a dog and ten numbers"}],
    ]
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    for i, conv in enumerate(convs):  # different lengths: rows are left-padded in the batch
        engine.submit(GenerationRequest(f"bt{i}", tuple(conv), greedy))
    first = drain(engine)
    for i, conv in enumerate(convs):
        history = conv + [
            {"role": "assistant", "content": text_of(first[f"bt{i}"])},
            {"role": "user", "content": "More?"},
        ]
        req = GenerationRequest(f"next{i}", tuple(history), SamplingParams(temperature=0.0, max_tokens=8))
        ids = engine.render_prompt(req)  # the history's own ids, as the engine will use them
        expected = generate(engine._model, engine._tokenizer, prompt=ids, max_tokens=8)
        engine.submit(req)
        evs = drain(engine)[f"next{i}"]
        assert evs[-2].cached_tokens > len(ids) // 2
        assert text_of(evs) == expected


def test_requests_finishing_at_different_steps_keep_exact_outputs_and_caches(engine):
    """Finished rows idle in the batch until compaction; nobody's tokens or cache shift.

    Six requests of different prompt lengths and lengths finish on different steps, so
    the batch decodes with idle rows, then compacts; every output must equal the same
    request run alone, and every next turn, served from the KV gathered at retirement,
    must equal a cold run of that turn.
    """
    from mlx_lm import generate

    prompts = [("short", 3), ("a somewhat longer question about foxes", 5),
               ("x", 9), ("count the ten numbers slowly and carefully please", 12),
               ("why", 15), ("tell me about dogs", 7)]
    alone = {}
    for i, (text, n) in enumerate(prompts):
        engine.submit(ask(text, f"solo{i}", max_tokens=n))
        alone[i] = text_of(drain(engine)[f"solo{i}"])
    for i, (text, n) in enumerate(prompts):
        engine.submit(ask(text, f"mix{i}", max_tokens=n))
    events: dict[str, list] = defaultdict(list)
    idle_seen = 0
    while engine.has_work():
        for rid, evs in engine.step():
            events[rid].extend(evs)
        idle_seen = max(idle_seen, len(engine._idle_rows))
    assert idle_seen > 0  # rows did idle in the batch
    assert not engine._idle_rows and not engine._batch
    for i in range(len(prompts)):
        assert text_of(events[f"mix{i}"]) == alone[i], i
        assert done_of(events[f"mix{i}"]) == "length"
    for i, (text, _) in enumerate(prompts):
        history = [{"role": "user", "content": text},
                   {"role": "assistant", "content": text_of(events[f"mix{i}"])},
                   {"role": "user", "content": "More?"}]
        req = GenerationRequest(f"mixnext{i}", tuple(history), SamplingParams(temperature=0.0, max_tokens=5))
        ids = engine.render_prompt(req)
        expected = generate(engine._model, engine._tokenizer, prompt=ids, max_tokens=5)
        engine.submit(req)
        evs = drain(engine)[f"mixnext{i}"]
        assert evs[-2].cached_tokens > len(ids) // 2, i
        assert text_of(evs) == expected, i


def test_first_token_is_handed_out_on_the_step_that_prefills(engine):
    """A lone request's first step returns its first token; one-token replies cache right."""
    engine.submit(ask("Hello there", "eager", max_tokens=5))
    first = engine.step()
    # (its text may still be held back by the streaming detokenizer: count tokens)
    assert engine._single is not None and len(engine._single.act.generated) == 1
    evs = [e for _, es in first for e in es] + drain(engine)["eager"]
    assert evs[-2].completion_tokens == 5 and done_of(evs) == "length"
    # A one-token reply finishes on the step that handed its token out, before that
    # token was fed: the cache kept must cover the prompt only, and reuse stays exact.
    from mlx_lm import generate

    engine.submit(ask("One word answer", "one", max_tokens=1))
    drain(engine)
    req = ask("One word answer", "again", max_tokens=4)
    ids = engine.render_prompt(req)
    engine.submit(req)
    evs = drain(engine)["again"]
    assert evs[-2].cached_tokens == len(ids) - 1
    assert text_of(evs) == generate(engine._model, engine._tokenizer, prompt=ids, max_tokens=4)


@contextmanager
def first_token_steps(engine):
    """Record the engine step on which each request's first token was taken."""
    steps: dict[str, int] = {}
    take = engine._take_token

    def spy(act, token, events, now=None):
        steps.setdefault(act.req.request_id, engine._steps)
        return take(act, token, events, now)

    engine._take_token = spy
    try:
        yield steps
    finally:
        del engine._take_token


def test_cold_prompts_arriving_together_prefill_shortest_first(engine):
    """Prompts that arrive together are prefilled shortest first, in small groups, not in
    one pass padded to the longest: the short ones get their first token sooner, and
    every reply is still what it is alone."""
    sizes = [120, 70, 35, 10]  # words, submitted longest first
    prompts = [" ".join(["local models count to ten"] * (n // 5)) + f" take {n}." for n in sizes]
    alone = []
    for i, p in enumerate(prompts):
        engine.submit(ask(p, f"solo{i}", max_tokens=6))
        alone.append(text_of(drain(engine)[f"solo{i}"]))
    engine._prefix.clear()
    with first_token_steps(engine) as first_step:
        for i, p in enumerate(prompts):
            engine.submit(ask(p, f"cold{i}", max_tokens=6))
        events = drain(engine)
    lengths = [events[f"cold{i}"][-2].prompt_tokens for i in range(len(sizes))]
    assert lengths == sorted(lengths, reverse=True)
    steps = [first_step[f"cold{i}"] for i in range(len(sizes))]
    assert steps == sorted(steps, reverse=True), (lengths, steps)
    assert steps[-1] < steps[0]
    assert [text_of(events[f"cold{i}"]) for i in range(len(sizes))] == alone


def test_a_short_prompt_joins_a_long_prefill_instead_of_waiting_for_all_of_it(model_dir):
    """A long prompt that arrives while another request decodes is prefilled in chunks;
    a short prompt arriving meanwhile gets its first token long before the long one."""
    spec = ModelSpec(str(model_dir), "mlx", context_size=2048, options=(
        ("max_concurrency", 8), ("warmup_batch_sizes", (1, 2)), ("prefill_step_size", 32)))
    eng = MlxEngine(spec)
    try:
        long_text = " ".join(["local models count to ten"] * 80)  # ~400 tokens: 13 chunks
        eng.submit(ask("Count to ten.", "decoding", max_tokens=40))
        with first_token_steps(eng) as first_step:
            eng.step()  # "decoding" runs alone
            eng.submit(ask(long_text, "long", max_tokens=4))
            eng.step()
            eng.step()  # the long prompt is a few chunks in
            eng.submit(ask("Say hi.", "short", max_tokens=4))
            events = drain(eng)
        assert first_step["short"] < first_step["long"] - 4, first_step
        assert all(done_of(events[rid]) == "length" for rid in ("decoding", "long", "short"))
    finally:
        eng.close()
