"""What the MLX prefill benches (batch_prefill, kv_length) share: the model they time,
built with random weights, and a timer that waits for the device on both sides."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def prefill_model(quick: bool, prefix: str) -> tuple[Any, dict[str, Any]]:
    """(model, shape): Qwen3-0.6B's shape in bf16 on the GPU, or with `quick` a tiny one
    in float32 on the CPU (the plumbing, not a figure). Seeded: every run the same."""
    import mlx.core as mx

    if quick:
        mx.set_default_device(mx.cpu)
    from mlx_lm.utils import load_model

    from bench.chat import untied
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    shape = QWEN3_SHAPE if quick else untied(QWEN3_0_6B_SHAPE)
    build_model_dir(folder, shape, seed=3, dtype="float32" if quick else "bfloat16")
    model, _ = load_model(folder)
    return model, shape


def synced_ms(fn: Callable[[], Any]) -> float:
    """Milliseconds `fn` takes, the device synchronised before and after (MLX is lazy:
    without it the time is the graph's building, not its running)."""
    import mlx.core as mx

    mx.synchronize()
    t = time.perf_counter()
    fn()
    mx.synchronize()
    return round((time.perf_counter() - t) * 1000, 2)
