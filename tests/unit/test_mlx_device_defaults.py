"""The MLX engine's device-dependent defaults (issue 49): bucketed_kv, prefilling cached
turns alone and prefilling those arriving together in one pass were measured on CUDA only, so they are on by default there and nowhere else;
an engine option still overrides each."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines.base import ModelSpec
from core.engines.mlx.device_defaults import device_defaults, this_device
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


def test_cuda_buckets_the_history_and_prefills_cached_turns_alone() -> None:
    d = device_defaults(on_gpu=True, cuda=True)
    assert (d.device, d.bucketed_kv, d.prefill_alone_tokens) == ("gpu", True, 512)
    assert d.bucketed_prefill and d.warmup_prefill
    assert (d.group_cached_turns, d.group_attention) == (True, "matmul")


def test_metal_keeps_the_fixed_prefill_shapes_but_not_the_cuda_measured_options() -> None:
    d = device_defaults(on_gpu=True, cuda=False)
    assert (d.device, d.bucketed_kv, d.prefill_alone_tokens) == ("gpu", False, 0)
    assert d.bucketed_prefill and d.warmup_prefill
    assert (d.group_cached_turns, d.group_attention) == (False, "fused")


def test_the_cpu_takes_none_of_the_gpu_options_even_where_cuda_is_installed() -> None:
    d = device_defaults(on_gpu=False, cuda=True)
    assert d == device_defaults(on_gpu=False, cuda=False)
    assert (d.device, d.bucketed_kv, d.prefill_alone_tokens) == ("cpu", False, 0)
    assert not d.bucketed_prefill and not d.warmup_prefill
    assert (d.group_cached_turns, d.group_attention) == (False, "fused")


def test_this_cpu_process_gets_the_cpu_defaults() -> None:
    import mlx.core as mx

    if mx.default_device().type == mx.DeviceType.gpu:
        pytest.skip("a GPU is MLX's default device here")
    assert this_device() == device_defaults(on_gpu=False, cuda=False)


@pytest.mark.slow
def test_the_engine_takes_its_device_defaults_and_an_option_overrides_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.engines.mlx import MlxEngine, engine

    monkeypatch.setattr(engine, "this_device", lambda: device_defaults(on_gpu=True, cuda=True))
    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    base = (("warmup_batch_sizes", (1,)), ("warmup_prefill", False), ("kv_disk_gb", 0))
    import mlx.core as mx

    before = mx.set_cache_limit(0)
    mx.set_cache_limit(before)
    override = (("bucketed_kv", False), ("prefill_alone_tokens", 0), ("cache_limit_gb", 1),
                ("group_cached_turns", False), ("group_attention", "fused"),
                ("group_pipelined", False))
    try:
        for extra, kv, alone in (((), True, 512), (override, False, 0)):
            eng = MlxEngine(ModelSpec(str(model), "mlx", context_size=4096, options=base + extra))
            try:
                assert (eng._bucketed_kv, eng._alone_tokens) == (kv, alone)
                assert (eng._group_cached, eng._group_matmul, eng._group_pipelined) == (kv,) * 3
                assert mx.set_cache_limit(eng.cache_limit) == eng.cache_limit
                assert eng.cache_limit == (10**9 if extra else eng.cache_limit)
            finally:
                eng.close()
    finally:
        mx.set_cache_limit(before)


def test_cuda_keeps_an_eighth_of_mlx_buffer_cache_and_elsewhere_all_of_it() -> None:
    assert device_defaults(on_gpu=True, cuda=True).cache_share == 8
    assert device_defaults(on_gpu=True, cuda=False).cache_share == 1
    assert device_defaults(on_gpu=False, cuda=True).cache_share == 1


def test_the_cache_cap_divides_mlx_default_once_however_many_engines_set_it() -> None:
    import mlx.core as mx

    from core.engines.mlx.device_defaults import limit_cache

    before = mx.set_cache_limit(0)
    mx.set_cache_limit(before)
    try:
        first = limit_cache(8)
        assert limit_cache(8) == first  # a second engine in the process: not 1/64
        assert mx.set_cache_limit(first) == first
        assert limit_cache(1) >= first * 8 - 8  # share 1: MLX's own default again
        assert limit_cache(8, gb=0.5) == 500_000_000  # the option wins
    finally:
        mx.set_cache_limit(before)
