"""Behind a real `serve` with an MLX model (issue 43 items 3 and 4): a client gone during
a long prefill frees the worker, and Anthropic's `message_start` carries the real counts.

The MLX engine prefilled a prompt in one step (a cancel landed after all of it) and sent
no PromptRead (message_start carried an estimate). A tiny random-weight model
(tests/fixtures/mlx_models.py) with a 16k context: its 13,000-token prompt takes seconds.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from core.engines.base import ModelSpec
from core.server.connections import ServeLimits
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread, served

pytestmark = pytest.mark.slow


def _long(words: int, tag: str = "") -> str:
    return tag + " ".join(f"item{i} is a word" for i in range(words)) + ". What is item7?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    model = build_model_dir(tmp_path_factory.mktemp("mlx-prefill") / "tiny",
                            {**QWEN3_SHAPE, "max_position_embeddings": 16384})
    spec = ModelSpec(str(model), "mlx", context_size=16384, options=(
        ("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0), ("prefill_step_size", 512),
        ("label", "tiny")))
    yield from served(spec, tmp_path_factory.mktemp("mlx-prefill-home"),
                      limits=ServeLimits(stream_open_s=0.2, keepalive_s=0.5))


def _model(server: ServerThread) -> str:
    return httpx.get(server.url + "/models", timeout=30).json()["data"][0]["id"]


def _open_then_leave(root: str, body: dict[str, Any]) -> bytes:
    """A streamed Anthropic request on a raw socket, read until two pings came, closed."""
    where = urlsplit(root)
    data = json.dumps(body).encode()
    sock = socket.create_connection((where.hostname, where.port), timeout=60)
    try:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        seen = b""
        while seen.count(b"event: ping") < 2:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
        return seen
    finally:
        sock.close()


def test_a_client_gone_during_a_long_prefill_frees_the_worker(server: ServerThread) -> None:
    """The next request's reply comes well before the long prompt's prefill would have
    ended (its length at the rate this box runs, measured on a third of it: attention
    makes the whole slower than three thirds, so the bound is a generous one)."""
    model = _model(server)
    root = server.url.removesuffix("/v1")
    seen = _open_then_leave(root, {"model": model, "max_tokens": 8, "stream": True,
                                   "messages": [{"role": "user", "content": _long(1000)}]})
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
        "messages": [{"role": "user", "content": _long(333, "Rate. ")}]})
    full_prefill_s = 3 * (time.monotonic() - started)
    assert rated.status_code == 200, rated.text
    assert freed_s < full_prefill_s / 3, (freed_s, full_prefill_s)


def _anthropic_usage(server: ServerThread, model: str, system: str,
                     question: str) -> tuple[dict, dict]:
    """message_start's usage and message_delta's, of a streamed Anthropic request."""
    body = {"model": model, "max_tokens": 2, "stream": True, "system": system,
            "messages": [{"role": "user", "content": question}]}
    with httpx.stream("POST", server.url.removesuffix("/v1") + "/v1/messages", json=body,
                      timeout=300) as reply:
        assert reply.status_code == 200, reply.read()
        datas = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    start = next(d for d in datas if d["type"] == "message_start")["message"]["usage"]
    delta = next(d for d in datas if d["type"] == "message_delta")["usage"]
    return start, delta


def test_anthropics_message_start_carries_the_real_counts_apart(server: ServerThread) -> None:
    """message_start carried an estimate (the prompt's characters / 4) and no cached part;
    now the MLX worker's count before the prefill, the cached tokens apart, as
    message_delta does."""
    model = _model(server)
    system = _long(60, "Count me. ")
    for turn, question in enumerate(("What is item3?", "And item4?")):
        start, delta = _anthropic_usage(server, model, system, question)
        assert start == {**delta, "output_tokens": 0}, (turn, start, delta)
    assert start["cache_read_input_tokens"] > start["input_tokens"] > 0, start  # apart
