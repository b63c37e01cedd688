"""Cached turns joining the batch are prefilled alone (issue 49: on a GPU the batched
prefill of a later turn's few new tokens over long merged histories cost ~150 ms), and
the prompt batch's whole-batch split moves its cache instead of deep-copying it.

Neither may change what a user sees: the same greedy tokens and cached-token counts as
the batched prefill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import TextDelta, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("alone") / "tiny", QWEN3_SHAPE)


def _turns(engine: Any, convs: list[list[dict[str, str]]], tag: str) -> list[tuple[str, int]]:
    """One turn of every conversation, all submitted at once; (text, cached) each."""
    for i, msgs in enumerate(convs):
        engine.submit(GenerationRequest(f"{tag}-{i}", tuple(msgs),
                                        SamplingParams(temperature=0.0, max_tokens=12)))
    text: dict[str, str] = {}
    usage: dict[str, Usage] = {}
    while engine.has_work():
        for rid, events in engine.step():
            for e in events:
                if isinstance(e, TextDelta):
                    text[rid] = text.get(rid, "") + e.text
                elif isinstance(e, Usage):
                    usage[rid] = e
    out = []
    for i, msgs in enumerate(convs):
        rid = f"{tag}-{i}"
        out.append((text.get(rid, ""), usage[rid].cached_tokens))
        msgs.append({"role": "assistant", "content": text.get(rid, "")})
    return out


def _session(model: Path, alone: int, group: str = "off", long_row: bool = False,
             broken: bool = False) -> tuple[list[list[tuple[str, int]]], int, int]:
    """Three conversations' three turns; (their (text, cached), requests joined as cached
    turns, rows prefilled in a group pass). `group`: off, matmul or fused attention;
    `long_row`: the first conversation's last message too long to share a pass;
    `broken`: the pass fails."""
    from core.engines.mlx import MlxEngine, batch

    engine = MlxEngine(ModelSpec(str(model), "mlx", context_size=4096, options=(
        ("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0), ("prefill_alone_tokens", alone),
        ("group_cached_turns", group != "off"), ("group_attention", group))))
    joined = []
    grouped = []
    join = engine._join_prefilled

    def spy(acts: list[Any], out: dict[str, Any]) -> None:
        joined.extend(acts)
        join(acts, out)

    engine._join_prefilled = spy
    real_pass = batch.group_pass

    def group_spy(model: Any, caches: list[Any], *args: Any) -> Any:
        grouped.extend(caches)
        if broken:  # a model the pass does not fit
            raise ValueError("no such rope")
        return real_pass(model, caches, *args)

    batch.group_pass = group_spy
    convs = [[{"role": "system", "content": f"Conversation {i}. " + "Be brief. " * 120}]
             for i in range(3)]
    turns = []
    try:
        for t, words in enumerate((4, 9, 30)):
            for i, msgs in enumerate(convs):
                extra = 300 if long_row and t == 2 and i == 0 else 0
                msgs.append({"role": "user",
                             "content": f"turn {t} " + "count " * (words + i + extra)})
            turns.append(_turns(engine, convs, f"t{t}"))
    finally:
        batch.group_pass = real_pass
        engine.close()
    return turns, len(joined), len(grouped)


def test_cached_turns_prefilled_alone_give_the_same_tokens_and_cache_hits(model: Path) -> None:
    batched, none_joined, _ = _session(model, 0)
    alone, joined, grouped = _session(model, 512)
    assert none_joined == 0
    assert (joined, grouped) == (6, 0)  # turns 2 and 3 of all three conversations
    assert alone == batched
    assert all(cached >= 256 for turn in alone[1:] for _, cached in turn)


@pytest.mark.parametrize("attention", ["matmul", "fused"])
def test_cached_turns_arriving_together_share_one_pass_and_give_the_same_tokens(
        model: Path, attention: str) -> None:
    batched, _, _ = _session(model, 0)
    together, joined, grouped = _session(model, 512, attention)
    assert (joined, grouped) == (6, 6)  # both later turns: all three rows in one pass
    assert together == batched
    assert all(cached >= 256 for turn in together[1:] for _, cached in turn)


def test_a_turn_too_long_to_share_the_pass_is_prefilled_alone_beside_it(model: Path) -> None:
    batched, _, _ = _session(model, 0, long_row=True)
    mixed, joined, grouped = _session(model, 2048, "matmul", long_row=True)
    assert (joined, grouped) == (6, 5)  # the last turn: two rows in the pass, one alone
    assert mixed == batched


def test_whole_batch_split_moves_the_cache_and_a_partial_split_copies(model: Path) -> None:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    from core.engines.mlx.lean_prompt import LeanPromptBatch

    m, _ = load_model(model)

    def batch() -> LeanPromptBatch:
        caches = []
        for n in (5, 9):
            c = make_prompt_cache(m)
            m(mx.array([list(range(1, n + 1))]), cache=c)
            caches.append(c)
        return LeanPromptBatch(m, [10, 11], caches, tokens=[[1] * 5, [1] * 9],
                               samplers=[None, None], logits_processors=[(), ()])

    whole = batch()
    layers = whole.prompt_cache
    taken = whole.split([1, 0])
    assert taken.uids == [10, 11] and taken.prompt_cache is layers  # moved, not copied
    assert whole.uids == [] and whole.prompt_cache == [] and len(whole) == 0
    assert taken.prompt_cache[0].keys.shape[0] == 2

    part = batch()
    one = part.split([1])
    assert one.uids == [11] and part.uids == [10]
    assert one.prompt_cache is not part.prompt_cache


def test_the_warm_up_meets_the_group_pass_at_each_row_count(
        model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA some of the group pass's kernels are compiled the first time they run: a
    chat bench's first later turns waited 4.7 s for them until the warm-up met them."""
    from core.engines.mlx import MlxEngine, warmup

    rows: list[int] = []
    real_pass = warmup.group_pass

    def spy(model: Any, caches: list[Any], *args: Any) -> Any:
        rows.append(len(caches))
        return real_pass(model, caches, *args)

    monkeypatch.setattr(warmup, "group_pass", spy)
    for group, want in ((True, [2, 4, 8]), (False, [])):
        rows.clear()
        engine = MlxEngine(ModelSpec(str(model), "mlx", context_size=4096, options=(
            ("warmup_batch_sizes", (1,)), ("warmup_prefill", True), ("kv_disk_gb", 0),
            ("group_cached_turns", group))))
        engine.close()
        assert rows == want


def test_a_model_the_pass_does_not_fit_prefills_each_turn_alone_and_loses_nothing(
        model: Path) -> None:
    batched, _, _ = _session(model, 0)
    survived, joined, tried = _session(model, 512, "matmul", broken=True)
    assert (joined, tried) == (6, 3)  # tried once, then never again
    assert survived == batched
