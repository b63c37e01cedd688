"""GET /metrics on `llmdeck serve`, read with prometheus_client's own text parser.

A real server on loopback over a real worker (the scripted engine): after requests in
several dialects, the page must parse as Prometheus text and count them by route and
status, count their tokens, time their first token and their tokens after it, and show
the loaded model, its memory, the queue and worker restarts; never a word of what was
said, not even from a path a client made up.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import anthropic
import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from core.server import ServerHandle
from tests.fixtures.serve import ServerThread, scripted_spec, served

SECRET = "zebra-quartz-7731"  # a word that must never reach /metrics


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(), tmp_path_factory.mktemp("metrics-home"))


def _root(server: ServerThread) -> str:
    return server.url.removesuffix("/v1")


def _scrape(root: str, **kwargs: object) -> tuple[str, dict[str, list]]:
    reply = httpx.get(root + "/metrics", timeout=10, **kwargs)  # type: ignore[arg-type]
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    families = {f.name: f.samples for f in text_string_to_metric_families(reply.text)}
    return reply.text, families


def _value(samples: list, name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert found, (name, labels)
    return sum(found)


def test_requests_tokens_and_timings_are_counted_by_route(server: ServerThread) -> None:
    root = _root(server)
    ask = [{"role": "user", "content": f"Tell me about {SECRET}."}]
    messages = anthropic.Anthropic(base_url=root, api_key="x", max_retries=0)
    for _ in range(2):
        messages.messages.create(model="scripted", max_tokens=200, messages=ask)
    with pytest.raises(anthropic.BadRequestError):
        messages.messages.create(model="scripted", max_tokens=200, messages=[{"role": "bot",
                                                                               "content": SECRET}])
    OpenAI(base_url=server.url, api_key="x", max_retries=0).responses.create(
        model="scripted", input=SECRET, stream=False)
    httpx.post(root + "/api/chat", json={"model": "scripted", "messages": ask, "stream": True})
    OpenAI(base_url=server.url, api_key="x", max_retries=0).chat.completions.create(
        model="scripted", messages=ask)
    httpx.post(root + f"/{SECRET}/x", json={"secret": SECRET})  # an unknown path
    text, families = _scrape(root)
    assert SECRET not in text and "zebra" not in text

    requests = families["llmdeck_requests"]  # the parser drops a counter's _total
    assert _value(requests, "llmdeck_requests_total", route="/v1/messages", status="200") == 2
    assert _value(requests, "llmdeck_requests_total", route="/v1/messages", status="400") == 1
    assert _value(requests, "llmdeck_requests_total", route="/v1/responses", status="200") == 1
    assert _value(requests, "llmdeck_requests_total", route="/api/chat", status="200") == 1
    assert _value(requests, "llmdeck_requests_total", route="other", status="404") == 1

    tokens_out = families["llmdeck_generation_tokens"]
    assert _value(tokens_out, "llmdeck_generation_tokens_total", route="/v1/messages") > 10
    assert _value(families["llmdeck_prompt_tokens"], "llmdeck_prompt_tokens_total",
                  route="/api/chat") > 0
    assert _value(tokens_out, "llmdeck_generation_tokens_total",
                  route="/v1/chat/completions") > 10  # the OpenAI route is metered too
    ttft = families["llmdeck_time_to_first_token_seconds"]
    assert _value(ttft, "llmdeck_time_to_first_token_seconds_count", route="/v1/messages") == 2
    assert _value(ttft, "llmdeck_time_to_first_token_seconds_bucket", route="/v1/messages",
                  le="+Inf") == 2
    assert _value(ttft, "llmdeck_time_to_first_token_seconds_sum", route="/v1/messages") > 0
    tpot = families["llmdeck_time_per_output_token_seconds"]
    assert _value(tpot, "llmdeck_time_per_output_token_seconds_count", route="/api/chat") == 1

    assert _value(families["llmdeck_model_loaded"], "llmdeck_model_loaded", model="scripted") == 1
    assert _value(families["llmdeck_model_rss_bytes"], "llmdeck_model_rss_bytes",
                  model="scripted") > 1_000_000
    # the model's memory is the figure GET /v1/models gives (issue 48.9: they disagreed)
    listed = {m["id"]: m for m in httpx.get(root + "/v1/models", timeout=10).json()["data"]}
    assert _value(families["llmdeck_model_memory_bytes"], "llmdeck_model_memory_bytes",
                  model="scripted") == listed["scripted"]["memory_bytes"]
    assert _value(families["llmdeck_queue_depth"], "llmdeck_queue_depth") == 0
    assert _value(families["llmdeck_requests_active"], "llmdeck_requests_active") == 0


def test_a_killed_worker_shows_as_a_restart(server: ServerThread) -> None:
    root = _root(server)
    _, before = _scrape(root)
    restarts = _value(before["llmdeck_worker_restarts"], "llmdeck_worker_restarts_total")
    [pid] = server.runtime.pool.pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, after = _scrape(root)
        if _value(after["llmdeck_worker_restarts"], "llmdeck_worker_restarts_total") > restarts:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the restart never showed on /metrics")
    assert server.call(server.runtime.ensure_model())


def test_a_keyed_server_wants_the_key_for_metrics(server: ServerThread) -> None:
    handle = server.call(ServerHandle.start(server.runtime, "127.0.0.1", 0, api_key="k3y"))
    root = handle.url.removesuffix("/v1")
    try:
        refused = httpx.get(root + "/metrics")
        assert refused.status_code == 401 and "API key" in refused.text
        _scrape(root, headers={"Authorization": "Bearer k3y"})
    finally:
        server.call(handle.stop())
