"""The person's turn first on llama.cpp (issue 45 item 3): a running API reply is set
aside at a token boundary for an interactive turn and resumed as its own continuation.

The bundled Gemma GGUF in this process (no worker: the engine is what is tested; the
pool's side is test_pool_priority's). Before, the engine ran one reply to its end: the
person's turn waited for it, and there was no way to set a reply aside.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta, Usage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

API_TOKENS = 40


@pytest.fixture(scope="module", params=[True, False], ids=["lookup", "create_completion"])
def engine(request: pytest.FixtureRequest, bundled_gguf: Path) -> Iterator[Any]:
    """Both of the engine's greedy streams: prompt-lookup drafting and llama.cpp's own."""
    from core.engines.llamacpp import LlamaCppEngine

    # No disk cache (core.engines.kv_llama): a run's state stored on disk could load for
    # the next run over the same prompt (whether it does is the writer thread's timing),
    # leaving no prefill to chunk; and every reply paid a next-turn evaluation and a copy.
    eng = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024,
                                   options=(("speculative", request.param), ("kv_disk_gb", 0))))
    yield eng
    eng.close()


def _req(rid: str, text: str, tokens: int, interactive: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": text},),
                             SamplingParams(temperature=0.0, max_tokens=tokens),
                             interactive=interactive)


def _run(engine: Any, until: Any = None) -> dict[str, list[Any]]:
    """Step the engine until it has no work (or `until(events)` says stop); the events
    of each request, in order."""
    events: dict[str, list[Any]] = {}
    while engine.has_work():
        for rid, evs in engine.step():
            events.setdefault(rid, []).extend(evs)
        if until is not None and until(events):
            break
    return events


def _text(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _usage(events: list[Any]) -> Usage:
    return next(e for e in events if isinstance(e, Usage))


API = "Count from 1 to 100, one number after another, separated by commas."


def test_a_reply_set_aside_and_resumed_is_the_reply_unpaused(engine: Any) -> None:
    engine._llm.n_tokens = 0  # both from an empty context: the same prefill, the same logits
    engine.submit(_req("alone", API, API_TOKENS))
    alone = _run(engine)["alone"]
    assert _usage(alone).completion_tokens > 20  # long enough to be set aside midway
    engine._llm.n_tokens = 0
    engine.submit(_req("api", API, API_TOKENS))
    # 10 tokens into the API reply, a person's turn arrives
    seen = _run(engine, until=lambda ev: sum(isinstance(e, TextDelta) for e in ev.get("api", [])) >= 10)
    engine.submit(_req("person", "What is the capital of France?", 8, interactive=True))
    order: list[str] = []
    rest: dict[str, list[Any]] = {}
    while engine.has_work():
        for rid, evs in engine.step():
            rest.setdefault(rid, []).extend(evs)
            if any(isinstance(e, Done) for e in evs):
                order.append(rid)
    api = seen["api"] + rest["api"]
    assert order == ["person", "api"]  # the person's turn ended first: the API reply waited
    assert not any(isinstance(e, Error) for e in api + rest["person"])
    assert _text(rest["person"]).strip()
    assert _text(api) == _text(alone)  # one unbroken stream, token for token
    done = [e for e in api if isinstance(e, Done)]
    assert [d.finish_reason for d in done] == [next(e for e in alone if isinstance(e, Done)).finish_reason]
    a, b = _usage(api), _usage(alone)
    assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens)


def test_a_reply_set_aside_can_be_cancelled(engine: Any) -> None:
    engine.submit(_req("api2", API, API_TOKENS))
    _run(engine, until=lambda ev: sum(isinstance(e, TextDelta) for e in ev.get("api2", [])) >= 5)
    engine.submit(_req("person2", "Hello!", 4, interactive=True))
    engine.step()  # the API reply is set aside, the person's turn starts
    engine.cancel("api2")
    events = _run(engine)
    assert [type(e).__name__ for e in events["api2"]] == ["Usage", "Done"]
    assert events["api2"][-1].finish_reason == "cancelled"
    assert _usage(events["api2"]).completion_tokens >= 5
    assert any(isinstance(e, Done) and e.finish_reason != "error" for e in events["person2"])


# Two chunks of CHUNK tokens, fewer than 512 in all. A chunk is llama.cpp's batch, 512 by
# default; the property is the same at a smaller size, and three prefills of a prompt over
# 512 tokens (the one before, ~840) were most of this file's time.
LONG = "Notes: " + "the quick brown fox jumps over the lazy dog. " * 30 + API
CHUNK = 256


def test_a_reply_set_aside_mid_prefill_resumes_as_if_never_paused(engine: Any) -> None:
    """Set aside between two chunks of its prompt (core.engines.llama_prefill), the API
    request's context then holds the person's turn: its prefill is planned again on resume,
    never continued over the person's cells."""
    batch, engine._llm.n_batch = engine._llm.n_batch, CHUNK
    try:
        engine._llm.n_tokens = 0
        engine.submit(_req("long-alone", LONG, 8))
        alone = _run(engine)["long-alone"]
        engine._llm.n_tokens = 0
        engine.submit(_req("long", LONG, 8))
        _run(engine, until=lambda ev: engine._active is not None
             and engine._active.prefill is not None and engine._active.prefill.chunks >= 1)
        assert engine._active is not None and engine._active.prefill is not None, \
            "the prompt was never chunked"
        assert engine._active.prefill.size == CHUNK
        assert engine._active.first_token_at is None  # mid-prefill, one chunk in
        assert engine._active.prefill.at < engine._active.prefill.end  # a chunk still to go
        engine.submit(_req("person3", "What is the capital of France?", 4, interactive=True))
        events = _run(engine)
    finally:
        engine._llm.n_batch = batch
    assert not any(isinstance(e, Error) for e in events["long"] + events["person3"])
    assert _text(events["long"]) == _text(alone)
    assert _usage(events["long"]).prompt_tokens == _usage(alone).prompt_tokens
    assert CHUNK + 1 < _usage(alone).prompt_tokens < 512  # two chunks and the last token
