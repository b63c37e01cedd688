"""64 concurrent streaming HTTP clients on a tiny real MLX model all complete.

The model is a random-weight qwen3-shaped folder (tests/fixtures/mlx_models.py) loaded by
the real MLX engine in a real worker; clients are the official async openai client.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from core.engines.base import ModelSpec
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread

CLIENTS = 64


@pytest.fixture
def mlx_server(tmp_path: Path, llmdeck_home: Path) -> Iterator[ServerThread]:
    model = build_model_dir(tmp_path / "tiny-qwen3", QWEN3_SHAPE)
    spec = ModelSpec(str(model), "mlx", context_size=512,
                     options=(("max_concurrency", 32), ("warmup_batch_sizes", (1, 2)),
                              ("label", "tiny")))
    srv = ServerThread(spec, served_name="tiny")
    yield srv
    srv.close()
    assert os.environ["LLMDECK_HOME"] == str(llmdeck_home)


async def _one(client: AsyncOpenAI, i: int) -> tuple[str | None, int, int]:
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": f"Count to {i}."}], stream=True,
        stream_options={"include_usage": True}, max_tokens=12, temperature=0.0)
    finish, pieces, tokens = None, 0, 0
    async for chunk in stream:
        if chunk.choices:
            pieces += bool(chunk.choices[0].delta.content)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return finish, pieces, tokens


def test_64_concurrent_streaming_clients_all_complete(mlx_server: ServerThread) -> None:
    async def run() -> list[tuple[str | None, int, int]]:
        async with AsyncOpenAI(base_url=mlx_server.url, api_key="x", max_retries=0, timeout=120) as client:
            return await asyncio.gather(*(_one(client, i) for i in range(CLIENTS)))

    results = asyncio.run(run())
    assert len(results) == CLIENTS
    assert all(finish in ("stop", "length") for finish, _, _ in results), results
    assert all(tokens >= 1 for _, _, tokens in results), results
    assert sum(pieces for _, pieces, _ in results) > CLIENTS, "text must stream in pieces"
    assert mlx_server.runtime.model.info["engine"] == "mlx"
