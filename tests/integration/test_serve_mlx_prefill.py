"""Behind a real `serve` with an MLX model (issue 43 items 3 and 4): a client gone during
a long prefill frees the worker, and Anthropic's `message_start` carries the real counts.

The MLX engine prefilled a prompt in one step (a cancel landed after all of it) and sent
no PromptRead (message_start carried an estimate). A tiny random-weight model
(tests/fixtures/mlx_models.py) with a 16k context: its 13,000-token prompt takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from core.engines.base import ModelSpec
from core.server.connections import ServeLimits
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread, served
from tests.helpers.prefill import (
    check_message_start_counts,
    long_prompt,
    open_then_leave,
    served_model,
)

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    model = build_model_dir(tmp_path_factory.mktemp("mlx-prefill") / "tiny",
                            {**QWEN3_SHAPE, "max_position_embeddings": 16384})
    spec = ModelSpec(str(model), "mlx", context_size=16384, options=(
        ("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0), ("prefill_step_size", 512),
        ("label", "tiny")))
    yield from served(spec, tmp_path_factory.mktemp("mlx-prefill-home"),
                      limits=ServeLimits(stream_open_s=0.2, keepalive_s=0.5))


def test_a_client_gone_during_a_long_prefill_frees_the_worker(server: ServerThread) -> None:
    """The next request's reply comes well before the long prompt's prefill would have
    ended (its length at the rate this box runs, measured on a third of it: attention
    makes the whole slower than three thirds, so the bound is a generous one)."""
    model = served_model(server.url)
    root = server.url.removesuffix("/v1")
    seen = open_then_leave(root, "/v1/messages", {
        "model": model, "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": long_prompt(1000)}]}, b"event: ping")
    assert b" 200 " in seen.split(b"\r\n", 1)[0], seen[:300]
    assert b"message_start" in seen  # the count came before the prefill: not held
    started = time.monotonic()
    reply = httpx.post(server.url + "/chat/completions", timeout=120, json={
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi."}]})
    freed_s = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    started = time.monotonic()
    rated = httpx.post(server.url + "/chat/completions", timeout=300, json={
        "model": model, "max_tokens": 1,
        "messages": [{"role": "user", "content": long_prompt(333, "Rate. ")}]})
    full_prefill_s = 3 * (time.monotonic() - started)
    assert rated.status_code == 200, rated.text
    assert freed_s < full_prefill_s / 3, (freed_s, full_prefill_s)


def test_anthropics_message_start_carries_the_real_counts_apart(server: ServerThread) -> None:
    """message_start carried an estimate (the prompt's characters / 4) and no cached part;
    now the MLX worker's count before the prefill, the cached tokens apart, as
    message_delta does."""
    check_message_start_counts(server.url)
