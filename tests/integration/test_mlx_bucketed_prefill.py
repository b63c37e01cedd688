"""Bucketed prefill (the GPU's path: fixed chunk shapes, a padded last piece) changes nothing
a user can see: the same greedy tokens and cached-token counts as the plain path, for fresh
prompts and cached turns whose new-token counts fall on and between the bucket edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import TextDelta, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

pytestmark = pytest.mark.slow


def _run(engine: Any, messages: list[dict[str, str]], rid: str) -> tuple[str, int, int]:
    engine.submit(GenerationRequest(rid, tuple(messages), SamplingParams(temperature=0.0, max_tokens=10)))
    text, usage = "", None
    while engine.has_work():
        for _, events in engine.step():
            for event in events:
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, Usage):
                    usage = event
    assert usage is not None
    return text, usage.prompt_tokens, usage.cached_tokens


def _session(engine: Any) -> list[tuple[str, int, int]]:
    out = []
    messages = [{"role": "system", "content": "Be brief. " * 120}]
    for turn, words in enumerate([1, 3, 40, 120]):  # new-token counts 1 to ~250
        messages.append({"role": "user", "content": "count " * words})
        out.append(_run(engine, messages, f"turn-{turn}"))
        messages.append({"role": "assistant", "content": out[-1][0]})
    out.append(_run(engine, messages[:-1], "regenerate"))
    for words in (1, 30, 33, 255, 300):  # fresh prompts across the 32 and 256 edges
        out.append(_run(engine, [{"role": "user", "content": "x " * words}], f"fresh-{words}"))
    return out


def test_bucketed_prefill_gives_the_same_tokens_and_cache_hits(tmp_path: Path) -> None:
    from core.engines.mlx import MlxEngine

    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    results = []
    # plain; bucketed token counts; and the history's length bucketed too (bucketed_kv)
    for bucketed, kv in ((False, False), (True, False), (True, True)):
        spec = ModelSpec(str(model), "mlx", context_size=4096,
                         options=(("warmup_batch_sizes", (1,)), ("bucketed_prefill", bucketed),
                                  ("warmup_prefill", bucketed), ("bucketed_kv", kv),
                                  # both start cold: not warm from the other's disk cache
                                  ("kv_disk_gb", 0)))
        engine = MlxEngine(spec)
        try:
            results.append(_session(engine))
        finally:
            engine.close()
    plain, bucketed, bucketed_kv = results
    assert bucketed == plain
    assert bucketed_kv == plain
    assert any(cached > 500 for _, _, cached in plain)  # the turns really were cached


def test_a_bucketed_history_shows_attention_whole_buckets_and_the_same_result() -> None:
    """The pass sees keys up to the next multiple of 256 whatever the history's length,
    masked past the real ones, and attends exactly as the plain cache does."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from core.engines.mlx.bucketed_kv import BucketedKV, to_bucketed, to_plain

    mx.random.seed(0)
    history = mx.random.normal((1, 2, 300, 8))
    new_k, new_v = mx.random.normal((1, 2, 20, 8)), mx.random.normal((1, 2, 20, 8))
    q = mx.random.normal((1, 4, 20, 8))
    plain = KVCache()
    plain.update_and_fetch(history, history)
    cache = [KVCache()]
    cache[0].update_and_fetch(history, history)
    to_bucketed(cache)
    assert type(cache[0]) is BucketedKV
    mask = cache[0].make_mask(20)
    k, v = cache[0].update_and_fetch(new_k, new_v)
    assert k.shape[2] == 512 and mask.shape == (20, 512) and cache[0].keys.shape[2] % 256 == 0
    pk, pv = plain.update_and_fetch(new_k, new_v)
    got = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask=mask)
    want = mx.fast.scaled_dot_product_attention(q, pk, pv, scale=0.3, mask="causal")
    assert mx.allclose(got, want, atol=1e-5).item()
    to_plain(cache)
    assert type(cache[0]) is KVCache and cache[0].offset == 320


def test_the_next_turn_pass_in_idle_time_uses_the_bucketed_shapes_and_matches_a_plain_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk keeper's next-turn prefill (a reply over its history, in idle time) runs
    through the engine's pass: padded tail, history bucketed; the same cache as plainly."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from core.engines.mlx import MlxEngine
    from core.engines.mlx import prefix as prefix_mod

    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    spec = ModelSpec(str(model), "mlx", context_size=4096, options=(
        ("warmup_batch_sizes", (1,)), ("bucketed_prefill", True), ("warmup_prefill", False),
        ("bucketed_kv", True), ("kv_disk_gb", 1)))
    engine = MlxEngine(spec)
    try:
        assert engine._kv is not None and engine._kv._prefill == engine._follow_up_pass
        seen: list[str] = []
        bucket = prefix_mod.to_bucketed
        monkeypatch.setattr(prefix_mod, "to_bucketed",
                            lambda cache: (seen.append(type(cache[0]).__name__), bucket(cache)))
        history = list(range(5, 305))  # 300 tokens: not a multiple of 256
        reply = list(range(400, 437))  # 37: padded to 64, then trimmed

        def fresh() -> list[Any]:
            cache = [KVCache() for _ in engine._model.layers]
            engine._model(mx.array(history)[None], cache=cache)
            mx.eval([c.state for c in cache])
            return cache

        plain, ours = fresh(), fresh()
        engine._model(mx.array(reply)[None], cache=plain)
        engine._follow_up_pass(reply, ours)
        assert seen == ["KVCache"]
        assert all(type(c) is KVCache and c.offset == 337 for c in ours)
        for a, b in zip(plain, ours, strict=True):  # the real positions (past: padding)
            for x, y in ((a.keys, b.keys), (a.values, b.values)):
                assert mx.allclose(x[..., :337, :], y[..., :337, :], atol=1e-4).item()
    finally:
        engine.close()
