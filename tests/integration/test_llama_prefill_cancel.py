"""A long prompt's prefill on llama.cpp is cancellable (issue 43 item 3).

llama-cpp-python evaluates a whole prompt in the first `next()` of its stream, so a
client that went away during an agent's long prefill kept the worker busy to its end.
The engine now feeds a long prompt a batch per step (core.engines.llama_prefill), and the
worker hears a cancel between steps. On the bundled Gemma, in this process (the engine
alone) and behind a real `serve` (a worker process, every streaming dialect).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.llamacpp import LlamaCppEngine
from core.events import Done, TextDelta, Usage
from core.server.connections import ServeLimits
from tests.fixtures.engines import drain
from tests.fixtures.serve import ServerThread, served
from tests.helpers.prefill import (
    check_message_start_counts,
    long_prompt,
    open_then_leave,
    served_model,
)


def _ask(text: str, rid: str, max_tokens: int = 8) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": text},),
                             SamplingParams(temperature=0.0, max_tokens=max_tokens))


@pytest.fixture(scope="module")
def engine(bundled_gguf: Path) -> Iterator[LlamaCppEngine]:
    # No disk KV cache: it is not under test here, and a state one test stored could load
    # for the next (the "whole" prompt came back 720 tokens cached under -n 4).
    eng = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=4096,
                                   options=(("kv_disk_gb", 0),)))
    yield eng
    eng.close()


def _reply(events: list[Any]) -> tuple[str, Usage]:
    return ("".join(e.text for e in events if isinstance(e, TextDelta)),
            next(e for e in events if isinstance(e, Usage)))


@pytest.mark.slow
def test_a_cancel_during_a_long_prefill_frees_the_engine(engine: LlamaCppEngine) -> None:
    """Before, the first step evaluated all 800 prompt tokens and came back with the first
    token: a cancel could only land after it."""
    engine._llm.reset()
    engine.submit(_ask(long_prompt(120), "long"))
    assert [events for _, events in engine.step() if events] == []  # the start, one batch
    assert engine._active is not None and engine._active.prompt_tokens > 700
    assert engine._llm.n_tokens == 512  # of the prompt's 800: no token yet
    engine.cancel("long")
    events = [e for _, evs in engine.step() for e in evs]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
    assert not engine.has_work()
    text, _ = _reply(drain_one(engine, _ask("Say hi.", "next", 4)))
    assert text


def drain_one(engine: LlamaCppEngine, request: GenerationRequest) -> list[Any]:
    engine.submit(request)
    return drain(engine)[request.request_id]


@pytest.mark.slow
def test_a_chunked_prefill_answers_as_a_whole_one_and_a_retry_resumes_it(
        engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same greedy reply as the prompt fed whole; a request cut mid-prefill and sent
    again (an agent's retry) starts from what the cut one had evaluated."""
    text = long_prompt(100, "Retry. ")
    engine._llm.reset()
    engine.submit(_ask(text, "cut"))
    engine.step()  # the start and one batch
    engine.cancel("cut")
    engine.step()
    held = engine._llm.n_tokens
    chunked, usage = _reply(drain_one(engine, _ask(text, "again")))
    assert usage.cached_tokens >= held >= 512, (usage, held)
    engine._llm.reset()
    monkeypatch.setattr("core.engines.llamacpp.ChunkedPrefill.plan", lambda *a: None)
    whole, usage = _reply(drain_one(engine, _ask(text, "whole")))
    assert usage.cached_tokens == 0
    assert chunked == whole and whole


# -- behind serve ---------------------------------------------------------------------

ROUTES: list[tuple[str, dict[str, Any], bytes]] = [
    ("/v1/messages", {"max_tokens": 8}, b"event: ping"),
    ("/v1/chat/completions", {"max_tokens": 8}, b": keep-alive"),
    ("/v1/responses", {"max_output_tokens": 8}, b": keep-alive"),
    ("/api/chat", {"options": {"num_predict": 8}}, b'"content": ""'),
    ("/api/generate", {"options": {"num_predict": 8}}, b'"response": ""'),
    ("/v1/completions", {"max_tokens": 8}, b": keep-alive"),
]


@pytest.fixture(scope="module")
def server(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    spec = ModelSpec(str(bundled_gguf), "llamacpp", context_size=8192)
    yield from served(spec, tmp_path_factory.mktemp("prefill-home"),
                      limits=ServeLimits(stream_open_s=0.2, keepalive_s=0.5))


def _body(path: str, extra: dict[str, Any], text: str) -> dict[str, Any]:
    if path in ("/v1/completions", "/api/generate"):
        return {"model": "m", "stream": True, "prompt": text, **extra}
    if path == "/v1/responses":
        return {"model": "m", "stream": True, "input": text, **extra}
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}], **extra}


@pytest.mark.slow
def test_a_client_gone_during_a_long_prefill_frees_the_worker(server: ServerThread) -> None:
    """Every streaming dialect keeps a real llama.cpp prefill's stream alive, and a client
    that leaves during it frees the worker: the next request's reply comes well before
    the long prompt's prefill would have ended (its length at the rate this box runs)."""
    model = served_model(server.url)
    root = server.url.removesuffix("/v1")
    for path, extra, keepalive in ROUTES:  # each its own prompt: none resumes another's
        seen = open_then_leave(root, path, {**_body(path, extra, long_prompt(900, path)),
                                             "model": model}, keepalive)
        assert b" 200 " in seen.split(b"\r\n", 1)[0], seen[:300]
    started = time.monotonic()
    reply = httpx.post(server.url + "/chat/completions", timeout=120, json={
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi."}]})
    freed_s = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    # The rate here: a prompt of ~650 tokens, timed.
    measured = long_prompt(100, "Rate. ")
    started = time.monotonic()
    rated = httpx.post(server.url + "/chat/completions", timeout=300, json={
        "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": measured}]})
    rate_s = time.monotonic() - started
    tokens = rated.json()["usage"]["prompt_tokens"]
    long_tokens = tokens * 9  # long_prompt(900) is nine times long_prompt(100), near enough
    full_prefill_s = rate_s * long_tokens / tokens
    assert freed_s < full_prefill_s / 3, (freed_s, full_prefill_s)


@pytest.mark.slow
def test_anthropics_message_start_carries_the_real_counts_apart(server: ServerThread) -> None:
    """message_start carried an estimate (the prompt's characters / 4) and no cached part;
    now the worker's count before the prefill, the cached tokens apart, as message_delta."""
    check_message_start_counts(server.url)
