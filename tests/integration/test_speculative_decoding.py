"""Prompt-lookup speculative decoding gives exactly the tokens plain greedy decoding gives,
on the tiny MLX model (alone, with penalties, and beside a batch) and on the bundled Gemma
through llama.cpp (whose base-model default repetition penalty is on)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from core.config import Settings
from core.engines import llama_lookup
from core.engines.base import EngineLoadError, GenerationRequest, ModelSpec, SamplingParams
from core.engines.llama_params import repack_weights
from core.engines.llamacpp import LlamaCppEngine
from core.engines.mlx import MlxEngine
from core.events import Done, TextDelta, Usage
from tests.fixtures.engines import run_requests as run
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

COPY = "def main(): return sum(x * x for x in range(10))"  # the random model loops on it


def ask(text: str, rid: str, **sampling) -> GenerationRequest:
    sp = SamplingParams(**{"temperature": 0.0, "max_tokens": 64, **sampling})
    return GenerationRequest(rid, ({"role": "user", "content": text},), sp)


def reply(evs: list) -> tuple[str, int, str]:
    usage = next(e for e in evs if isinstance(e, Usage))
    done = next(e for e in evs if isinstance(e, Done))
    return "".join(e.text for e in evs if isinstance(e, TextDelta)), usage.completion_tokens, \
        done.finish_reason


OPTIONS = (("max_concurrency", 4), ("warmup_batch_sizes", (1, 2)))


@pytest.fixture(scope="module")
def mlx_dir(tmp_path_factory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("qwen3-spec"), QWEN3_SHAPE)


@pytest.fixture(scope="module")
def mlx_engine(mlx_dir):
    eng = MlxEngine(ModelSpec(str(mlx_dir), "mlx", context_size=2048, options=OPTIONS))
    yield eng
    eng.close()


def both_ways(engine, *requests: GenerationRequest) -> tuple[dict, dict]:
    out = []
    for on in (False, True):
        engine.speculative = on
        if isinstance(engine, MlxEngine):
            engine._prefix.clear()
        else:
            engine._llm.reset()
        out.append({rid: reply(evs) for rid, evs in run(engine, *requests).items()})
    engine.speculative = True
    return out[0], out[1]


@pytest.mark.parametrize("sampling", [
    {}, {"repetition_penalty": 1.1, "repetition_context_size": 8},
    {"presence_penalty": 0.2, "presence_context_size": 4, "logit_bias": ((7, 2.0),)},
    {"max_tokens": 30}])
def test_mlx_drafts_change_no_token_of_a_lone_greedy_reply(mlx_engine, sampling) -> None:
    mlx_engine.acceptance = None
    plain, drafted = both_ways(mlx_engine, ask(COPY, "a", **sampling))
    assert drafted == plain
    record = mlx_engine.acceptance
    assert record is not None and record.drafted > 0
    if not sampling:  # the random model loops, so its own history predicts it well
        assert record.accepted > record.drafted // 2


def test_mlx_batched_requests_decode_as_before_and_do_not_draft(mlx_engine) -> None:
    requests = [ask(COPY, "a"), ask("The quick brown fox", "b", max_tokens=20),
                ask("hello", "c", temperature=0.9, seed=3, max_tokens=10)]
    mlx_engine.acceptance = None
    plain, drafted = both_ways(mlx_engine, *requests)
    assert drafted == plain
    # "a" outlives the others and drafts once it is alone again; none drafted in the batch
    assert mlx_engine.acceptance is not None
    assert mlx_engine.acceptance.drafted + mlx_engine.acceptance.accepted < 2 * (64 - 20)


def joined_midway(engine, steps: int) -> dict[str, tuple]:
    """A runs alone for `steps` steps, then B arrives and both share the batch."""
    engine._prefix.clear()
    engine.submit(ask(COPY, "a"))
    events: dict[str, list] = defaultdict(list)
    for _ in range(steps):
        for rid, evs in engine.step():
            events[rid].extend(evs)
    for rid, evs in run(engine, ask("The quick brown fox", "b", max_tokens=12)).items():
        events[rid].extend(evs)
    return {rid: reply(evs) for rid, evs in events.items()}


def test_mlx_a_drafting_request_joins_a_batch_midway_and_its_reply_is_unchanged(mlx_engine):
    mlx_engine.speculative = False
    plain = joined_midway(mlx_engine, 6)
    mlx_engine.speculative = True
    mlx_engine.acceptance = None
    drafted = joined_midway(mlx_engine, 6)
    assert drafted == plain
    assert mlx_engine.acceptance is not None and mlx_engine.acceptance.accepted > 0


def test_mlx_a_cancel_while_drafting_keeps_the_cache_for_the_next_turn(mlx_engine) -> None:
    mlx_engine._prefix.clear()
    mlx_engine.submit(ask(COPY, "a"))
    events: list = []
    for _ in range(16):
        for _rid, evs in mlx_engine.step():
            events += evs
    mlx_engine.cancel("a")
    events += run(mlx_engine)["a"]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
    assert mlx_engine.acceptance is not None and mlx_engine.acceptance.drafted > 0
    again = run(mlx_engine, ask(COPY, "a2", max_tokens=4))["a2"]
    assert next(e for e in again if isinstance(e, Usage)).cached_tokens > 0


def test_mlx_a_sampled_request_never_drafts(mlx_engine) -> None:
    mlx_engine.acceptance = None
    run(mlx_engine, ask(COPY, "a", temperature=0.8, seed=1))
    assert mlx_engine.acceptance is None


def test_the_speculative_setting_turns_drafting_off(mlx_dir, tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("speculative = false\n", encoding="utf-8")
    settings = Settings.load(config)
    assert settings.speculative is False and not settings.problems
    engine = MlxEngine(ModelSpec(str(mlx_dir), "mlx", context_size=2048,
                                 options=(*OPTIONS, ("speculative", settings.speculative))))
    try:
        run(engine, ask(COPY, "a"))
        assert engine.acceptance is None
    finally:
        engine.close()


def test_llamacpp_drafts_change_no_token_and_are_accepted_on_a_copy_prompt(bundled_gguf) -> None:
    # The base model's transcript format with its default repetition penalty (replayed per
    # drafted position by llama_lookup.Penalties).
    engine = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024))
    try:
        text = ("Fix the typos in this paragraph: Teh quick brwon fox jumpd over teh lazy dgo. "
                "It was a sunny day and the fox was very hapy to be outsdie in the feilds. "
                "Later, it ran bakc to its den near the rivr, where its famly was wating.")
        plain, drafted = both_ways(engine, ask(text, "a", max_tokens=28))
        assert drafted == plain
        assert engine.base_model  # so the default repetition penalty applied both ways
        assert engine.acceptance is not None and engine.acceptance.accepted > 10
        # a stop string met inside an accepted draft ends the reply at the same place
        plain, drafted = both_ways(engine, ask(text, "a", max_tokens=28, stop=("den",)))
        assert drafted == plain and plain["a"][2] == "stop" and "den" not in plain["a"][0]
    finally:
        engine.close()


# Replies that drafts used to change (flash attention off, 9-token verifying passes; and
# on a CPU without AMX, where weights are repacked, 4- to 7-token passes): the drafted
# reply took the other token of a near-tie (top-2 margin 0.003 to 0.15 of a logit) at its
# 7th to 14th token, in Gemma's own turns with the base model's penalty.
FLIPPED = ("Explain how a bicycle works.", "List ten fruits and their colours.",
           "Write a short story about a cat who learns to fly.")


def test_llamacpp_replies_that_drafts_used_to_flip_are_identical(bundled_gguf, monkeypatch):
    rows: list[int] = []  # tokens per verifying pass
    decode = llama_lookup._decode

    def counting_decode(llm, tokens, all_rows):
        if all_rows:
            rows.append(len(tokens))
        return decode(llm, tokens, all_rows)

    monkeypatch.setattr(llama_lookup, "_decode", counting_decode)
    engine = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024,
                                      options=(("base_format", "turns"),)))
    try:
        assert engine._llm.context_params.flash_attn_type == 1  # on, for speculation
        for i, text in enumerate(FLIPPED):
            plain, drafted = both_ways(engine, ask(text, f"r{i}", max_tokens=24))
            assert drafted == plain, text
            assert engine.acceptance is not None and engine.acceptance.drafted > 0
        assert rows and max(rows) <= engine.exact_rows
        assert engine.exact_rows == llama_lookup.exact_rows(repack_weights())
    finally:
        engine.close()


def test_llamacpp_a_verifying_pass_of_exact_rows_gives_each_row_its_one_token_logits(
        bundled_gguf) -> None:
    """The premise of exactness on this machine's kernels: up to engine.exact_rows tokens
    in one pass give each row bit-for-bit the logits one-token passes give it (a llama.cpp
    upgrade or another CPU's kernels that break it fail here first)."""
    engine = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=256))
    try:
        llm, k = engine._llm, engine.exact_rows
        prompt = llm.tokenize(b"Explain how a bicycle works.", add_bos=True, special=True)
        llm.n_tokens = 0
        row = llama_lookup._decode(llm, prompt, False)[-1].copy()
        reply, singles = [], []
        for _ in range(k):
            reply.append(int(row.argmax()))
            row = llama_lookup._decode(llm, reply[-1:], False)[-1].copy()
            singles.append(row)
        llm.n_tokens = len(prompt)
        rows = llama_lookup._decode(llm, reply, True)
        assert [bytes(r.data) == bytes(s.data) for r, s in zip(rows, singles, strict=True)] == [True] * k
    finally:
        engine.close()


def test_llamacpp_a_model_that_refuses_flash_attention_loads_without_drafts(bundled_gguf,
                                                                          monkeypatch):
    from core.engines import llamacpp

    real_load = llamacpp.load_llama

    def load_refusing_flash_attention_mock(**kwargs):  # a build or model without it
        if kwargs.get("flash_attn"):
            raise ValueError("Failed to create llama_context")
        return real_load(**kwargs)

    monkeypatch.setattr(llamacpp, "load_llama", load_refusing_flash_attention_mock)
    engine = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=512))
    try:
        assert not engine.speculative  # drafts would no longer be exact
        text, _, finish = reply(run(engine, ask("Say hi.", "r", max_tokens=4))["r"])
        assert finish in ("stop", "length")
    finally:
        engine.close()
    # Asked for by name, flash attention that fails is the load's error, not a fallback.
    with pytest.raises(EngineLoadError):
        LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=512,
                                 options=(("flash_attn", True),)))


def test_mlx_a_draft_model_guesses_where_lookup_finds_nothing(mlx_dir, tmp_path) -> None:
    # The model as its own draft: every guess is right, so its reply must be unchanged and
    # every drafted token accepted (a draft model whose cache drifted would miss).
    engine = MlxEngine(ModelSpec(str(mlx_dir), "mlx", context_size=2048,
                                 options=(*OPTIONS, ("draft_model", str(mlx_dir)))))
    guesses: list[int] = []
    model_draft = engine._model_draft
    engine._model_draft = lambda act, k: guesses.append(k) or model_draft(act, k)  # counts
    try:
        request = ask("hello", "a", max_tokens=40)
        plain, drafted = both_ways(engine, request)
        assert drafted == plain and guesses
        record = engine.acceptance
        assert record is not None and record.drafted > 0 and record.accepted == record.drafted
    finally:
        engine.close()
    other = build_model_dir(tmp_path / "other", {**QWEN3_SHAPE, "vocab_size": 300})
    with pytest.raises(EngineLoadError, match="another vocabulary"):
        MlxEngine(ModelSpec(str(mlx_dir), "mlx", context_size=2048,
                            options=(*OPTIONS, ("draft_model", str(other)))))
