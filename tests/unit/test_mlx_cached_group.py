"""Cached turns prefilled together in one pass (core.engines.mlx.cached_group, issue 49):
the same logits and the same caches as each row prefilled alone over its own history, with
either attention, on a tiny random qwen3 built in memory (no files, a few ms)."""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core")

from mlx_lm.models.cache import KVCache, make_prompt_cache  # noqa: E402

from core.engines.mlx.cached_group import (  # noqa: E402
    GROUP_BYTES,
    detached,
    group_pass,
    group_rows,
    group_width,
    plain_attention,
    sharing,
)
from tests.fixtures.mlx_models import QWEN3_SHAPE  # noqa: E402


@pytest.fixture(scope="module")
def model() -> Any:
    from mlx_lm.models import qwen3

    mx.random.seed(7)
    m = qwen3.Model(qwen3.ModelArgs(**QWEN3_SHAPE, vocab_size=97))
    mx.eval(m.parameters())
    return m


def _history(model: Any, n: int, salt: int) -> list[Any]:
    cache = make_prompt_cache(model)
    model(mx.array([[(i * 13 + salt * 7) % 90 + 3 for i in range(n)]]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def _alone(model: Any, n: int, salt: int, suffix: list[int]) -> tuple[Any, list[Any]]:
    cache = _history(model, n, salt)
    logits = model(mx.array([suffix]), cache=cache)[:, -1, :]
    return logits, cache


@pytest.mark.parametrize("matmul", [True, False])
def test_one_pass_gives_each_row_what_its_own_pass_gives(model: Any, matmul: bool) -> None:
    histories = [(300, 1), (37, 2), (260, 3)]  # rows of different lengths: left padding
    suffixes = [[5, 6, 7], list(range(10, 50)), [9]]
    caches = [_history(model, n, s) for n, s in histories]
    logits, rows = group_pass(model, caches, suffixes, matmul)
    assert logits.shape == (3, 97)
    for i, ((n, s), suffix) in enumerate(zip(histories, suffixes, strict=True)):
        want, cache = _alone(model, n, s, suffix)
        assert mx.allclose(logits[i : i + 1], want, atol=1e-4).item()
        for got, ref in zip(rows[i], cache, strict=True):
            assert type(got) is KVCache and got.offset == ref.offset == n + len(suffix)
            end = ref.offset
            assert mx.allclose(got.keys[..., :end, :], ref.keys[..., :end, :], atol=1e-5).item()
            assert mx.allclose(got.values[..., :end, :], ref.values[..., :end, :],
                               atol=1e-5).item()
    # each row's cache goes on decoding as a plain cache does
    nxt = model(mx.array([[4]]), cache=rows[1])[:, -1, :]
    _, ref = _alone(model, 37, 2, suffixes[1])
    assert mx.allclose(nxt, model(mx.array([[4]]), cache=ref)[:, -1, :], atol=1e-4).item()


def test_the_pass_meets_few_shapes() -> None:
    assert [group_rows(n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]

    class Layer:
        def __init__(self, offset: int) -> None:
            self.offset = offset

    caches = [[Layer(2300)], [Layer(2490)]]
    assert group_width(caches, [85, 3]) == 2816  # 2490 + 96 up to a multiple of 256
    assert group_width(caches, [1, 3]) == 2560


def test_only_plain_short_rows_that_fit_share_a_pass(model: Any) -> None:
    a, b, c = _history(model, 40, 1), _history(model, 50, 2), _history(model, 60, 3)
    assert sharing([a, b], [3, 256]) == [0, 1]
    assert sharing([a], [3]) == []  # one row: its own pass
    assert sharing([a, b, c], [3, 257, 5]) == [0, 2]  # more than one padded piece: alone
    assert sharing([a, b], [3, 0]) == []
    assert sharing([a, make_prompt_cache(model), b], [3, 3, 3]) == [0, 2]  # an empty cache
    per_col = sum(2 * c.keys.shape[1] * c.keys.shape[3] * c.keys.dtype.size for c in a)
    big = _history(model, 1, 3)
    big[0].offset = big[1].offset = GROUP_BYTES // per_col  # as if that long
    assert sharing([a, big], [3, 3]) == []


def test_a_model_s_own_mask_or_sinks_go_to_the_fused_kernel() -> None:
    q = mx.random.normal((1, 4, 3, 16))
    k = v = mx.random.normal((1, 2, 5, 16))
    with plain_attention(True):
        got = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=None)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=None)
    assert mx.allclose(got, want, atol=1e-5).item()


def test_attention_is_restored_after_the_pass_even_when_it_fails() -> None:
    fused = mx.fast.scaled_dot_product_attention
    with pytest.raises(RuntimeError), plain_attention(True):
        assert mx.fast.scaled_dot_product_attention is not fused
        raise RuntimeError
    assert mx.fast.scaled_dot_product_attention is fused


def test_a_kept_row_owns_its_arrays(model: Any) -> None:
    caches = [_history(model, 20, 1), _history(model, 30, 2)]
    _, rows = group_pass(model, caches, [[3], [4]], True)
    kept = detached(rows[0])
    assert all(layer.keys.shape == (1, 2, 21, 16) for layer in kept)


def test_the_pipelined_pass_gives_the_same_logits(model: Any) -> None:
    suffixes = [[5, 6], [7, 8, 9]]
    plain, _ = group_pass(model, [_history(model, 30, 1), _history(model, 50, 2)], suffixes, True)
    piped, rows = group_pass(model, [_history(model, 30, 1), _history(model, 50, 2)], suffixes,
                             True, pipelined=True)
    assert mx.allclose(plain, piped, atol=1e-5).item()
    assert rows[1][0].offset == 53
