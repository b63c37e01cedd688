"""One MLX worker batching many sessions through the real pool and pipes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, TextDelta, Usage
from core.workers.pool import WorkerPool
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-qwen3"), QWEN3_SHAPE, seed=3)


def _request(i: int, turn: int, history: list[dict]) -> GenerationRequest:
    messages = (*history, {"role": "user", "content": f"Session {i}, question {turn}."})
    return GenerationRequest(f"s{i}-t{turn}", messages, SamplingParams(temperature=0.0, max_tokens=12),
                             session_id=f"s{i}")


async def _run(pool: WorkerPool, req: GenerationRequest) -> tuple[str, Usage, Done]:
    text, usage, done = [], None, None
    async for event in pool.generate("tiny", req):
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, Usage):
            usage = event
        elif isinstance(event, Done):
            done = event
    return "".join(text), usage, done


async def test_32_concurrent_sessions_complete_and_second_turns_hit_the_prefix_cache(
    tiny_qwen3: Path,
) -> None:
    pool = WorkerPool()
    spec = ModelSpec(str(tiny_qwen3), "mlx", context_size=2048,
                     options=(("max_concurrency", 32), ("warmup_batch_sizes", (1, 32))))
    info = await pool.load("tiny", spec)
    assert info["max_concurrency"] == 32
    assert info["torch"] is False  # a plain tokenizer.json: the worker never loaded torch
    first = await asyncio.gather(*(_run(pool, _request(i, 1, [])) for i in range(32)))
    assert all(done.finish_reason in ("stop", "length") for _, _, done in first)
    assert all(usage.completion_tokens > 0 for _, usage, _ in first)
    workers = {pool.worker_for_session("tiny", f"s{i}") for i in range(32)}
    assert len(workers) == 1

    second = await asyncio.gather(*(
        _run(pool, _request(i, 2, [{"role": "user", "content": f"Session {i}, question 1."},
                                   {"role": "assistant", "content": first[i][0]}]))
        for i in range(32)
    ))
    assert all(done.finish_reason in ("stop", "length") for _, _, done in second)
    cached = [usage.cached_tokens for _, usage, _ in second]
    assert all(c > 0 for c in cached), cached
    await pool.shutdown()
