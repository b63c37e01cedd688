"""The MLX engine's option defaults that depend on the device, each set where it was measured.

A GPU (CUDA or Metal) compiles kernels the first time it meets a shape, so prompts are
prefilled in a few fixed shapes met in warm-up (bucketed_prefill, warmup_prefill). On CUDA
(an H200, issue 49) two more hold: a cached turn joining the batch is prefilled alone
(prefill_alone_tokens), and the history's length is bucketed to 256-token steps for the
prefill passes (bucketed_kv, core.engines.mlx.bucketed_kv), because MLX builds an attention
plan for every new key length. bucketed_kv on the H200, in process (bench/later_turn.py):
later-turn p50 183-185 ms against 224-225 with arrivals together, 70-116 against 156-175
with 3 ms spread; over HTTP (bench/chat.py) 171 against 176 ms. Cached turns arriving
together share one pass there (group_cached_turns, core.engines.mlx.cached_group), its
attention as matmuls (group_attention) and pipelined per layer (group_pipelined): 8 turns'
first tokens in 27-28 ms against 129-155 ms alone (bench/group_pass.py), later turns over
HTTP 66-79 ms against the peer's 414-437 (bench/chat.py). None was measured on Metal, so
they stay off there and on the CPU; an engine option still overrides each.

On CUDA, MLX keeps freed buffers for reuse up to 80% of the card in every process, so two
MLX processes on one card (two models' workers, or a bench's servers) can starve each
other: on the H200 a worker died of cudaMallocAsync "out of memory" beside three others.
A worker there keeps at most CUDA_CACHE_SHARE of that (engine option cache_limit_gb).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

# A CUDA worker keeps 1/8 of MLX's default cache (80% of the card): ~14 GB on an H200,
# so eight such processes fit beside each other.
CUDA_CACHE_SHARE = 8


@dataclass(frozen=True)
class DeviceDefaults:
    device: str  # "gpu" or "cpu": which row of core.engines.prefill_order's tables
    warmup_prefill: bool
    bucketed_prefill: bool
    bucketed_kv: bool
    prefill_alone_tokens: int
    group_cached_turns: bool  # such turns arriving together share a pass (cached_group)
    group_attention: str  # that pass's attention: "matmul" or "fused"
    cache_share: int  # MLX's freed-buffer cache: 1/this of its default limit (1: as is)


def device_defaults(on_gpu: bool, cuda: bool) -> DeviceDefaults:
    """The defaults for a device: a GPU or not, and whether that GPU is CUDA's."""
    cuda = on_gpu and cuda
    return DeviceDefaults(
        device="gpu" if on_gpu else "cpu",
        warmup_prefill=on_gpu,
        bucketed_prefill=on_gpu,
        bucketed_kv=cuda,
        prefill_alone_tokens=512 if cuda else 0,
        group_cached_turns=cuda,
        group_attention="matmul" if cuda else "fused",
        cache_share=CUDA_CACHE_SHARE if cuda else 1,
    )


def this_device() -> DeviceDefaults:
    """The defaults for MLX's default device in this process."""
    on_gpu = mx.default_device().type == mx.DeviceType.gpu
    cuda = bool(getattr(getattr(mx, "cuda", None), "is_available", lambda: False)())
    return device_defaults(on_gpu, cuda)


_first_limit: list[int] = []  # MLX's own default, read once per process


def limit_cache(share: int, gb: float | None = None) -> int:
    """Cap MLX's freed-buffer cache at `gb` GB, else at 1/share of MLX's own default (a
    second engine in the process divides that default again, not the cap); the cap."""
    current = mx.set_cache_limit(0)
    if not _first_limit:
        _first_limit.append(current)
    cap = int(gb * 1e9) if gb is not None else _first_limit[0] // max(1, share)
    mx.set_cache_limit(cap)
    return cap
