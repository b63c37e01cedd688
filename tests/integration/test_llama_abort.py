"""An API reply's llama.cpp step in flight cut short for a person's turn, and done again
after (issue 45 item 3, core.engines.llama_abort).

The bundled Gemma GGUF, real llama.cpp: in this process for the engine (a flag raised
before or during a step), and in a real worker process for the pool (the person's turn
sent while an API prompt is prefilled). Before, the engine had no flag to listen to: a
step always ran to its end, so a person's turn waited for an API prompt's whole prefill.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, PromptRead, TextDelta, Usage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

API = "Count from 1 to 100, one number after another, separated by commas."
LONG = "Notes: " + "the quick brown fox jumps over the lazy dog. " * 45 + API  # ~470 tokens


@pytest.fixture(scope="module", params=[True, False], ids=["lookup", "create_completion"])
def engine(request: pytest.FixtureRequest, bundled_gguf: Path) -> Iterator[Any]:
    """Both of the engine's greedy streams, listening to a flag of their own."""
    from core.engines.llamacpp import LlamaCppEngine

    eng = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024,
                                   options=(("speculative", request.param),)))
    eng.flag = ctypes.c_bool(False)
    eng.listen(eng.flag)
    # The disk cache (core.engines.kv_llama) is set aside but for the test of a stored
    # state: with it, a run's state stored on disk could load for the next run over the
    # same prompt (whether it does is the writer thread's timing), leaving no prefill to
    # cut; and every reply paid a next-turn evaluation and a state copy.
    eng.disk_cache, eng._kv = eng._kv, None
    yield eng
    eng._kv = eng.disk_cache
    eng.close()


def _req(rid: str, text: str, tokens: int, interactive: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": text},),
                             SamplingParams(temperature=0.0, max_tokens=tokens),
                             interactive=interactive)


def _text(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _usage(events: list[Any]) -> Usage:
    return next(e for e in events if isinstance(e, Usage))


def _alone(engine: Any, request: GenerationRequest) -> list[Any]:
    engine._llm.n_tokens = 0  # from an empty context: the same prefill, the same logits
    engine.submit(request)
    events: list[Any] = []
    while engine.has_work():
        for _, evs in engine.step():
            events += evs
    return events


def test_steps_cut_short_are_done_again_token_for_token(engine: Any) -> None:
    """The flag up before every third step: each is cut at its first graph node and done
    again on the next; the reply is the uncut one, token for token, with the same usage."""
    alone = _alone(engine, _req("alone", API, 40))
    assert _usage(alone).completion_tokens > 20
    engine._llm.n_tokens = 0
    engine.submit(_req("api", API, 40))
    events: list[Any] = []
    cuts = steps = 0
    while engine.has_work():
        steps += 1
        engine.flag.value = steps % 3 == 0
        for _, evs in engine.step():
            events += evs
        cuts += engine._abort.fired
        engine.flag.value = False
    assert cuts >= 5, cuts  # the steps really were cut (prefill, first token, later ones)
    assert not any(isinstance(e, Error) for e in events)
    assert _text(events) == _text(alone)
    a, b = _usage(events), _usage(alone)
    assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens)
    assert [e.finish_reason for e in events if isinstance(e, Done)] == \
        [e.finish_reason for e in alone if isinstance(e, Done)]


def _runs_uncut(engine: Any, request: GenerationRequest) -> None:
    """Run `request` to its end with the flag up: no step of it may be cut."""
    engine._llm.n_tokens = 0
    engine.submit(request)
    engine.flag.value = True
    try:
        while engine.has_work():
            engine.step()
            assert not engine._abort.fired
    finally:
        engine.flag.value = False


def test_a_person_s_turn_is_never_cut(engine: Any) -> None:
    """The flag is for API work: a person's own turn runs on under it."""
    _runs_uncut(engine, _req("person", "What is the capital of France?", 6, interactive=True))


def test_a_seeded_sampled_reply_is_never_cut(engine: Any) -> None:
    """Started again, a seeded sampler would draw its random sequence from the start: the
    client would get another reply than the seed promises. So it runs on under the flag."""
    _runs_uncut(engine, GenerationRequest("seeded", ({"role": "user", "content": API},),
                                          SamplingParams(temperature=0.8, seed=7, max_tokens=6)))


def test_a_prefill_cut_midway_stops_at_once_and_the_reply_is_unchanged(engine: Any) -> None:
    """A ~470-token API prompt, fed whole in one step: the flag raised 30 ms in stops
    the step within a few graph nodes (well before the prefill would end), and the reply
    started again is the uncut one."""
    alone = _alone(engine, _req("long-alone", LONG, 8))
    engine._llm.n_tokens = 0
    engine.submit(_req("long", LONG, 8))
    marks: dict[str, float] = {}

    def raise_flag() -> None:
        time.sleep(0.03)
        marks["raised"] = time.perf_counter()
        engine.flag.value = True

    events: list[Any] = []
    raiser = threading.Thread(target=raise_flag)
    start = time.perf_counter()
    raiser.start()
    for _, evs in engine.step():  # the stream's first step: the whole prompt, then a token
        events += evs
    marks["returned"] = time.perf_counter()
    raiser.join()
    engine.flag.value = False
    assert engine._abort.fired
    latency = marks["returned"] - marks["raised"]
    while engine.has_work():
        for _, evs in engine.step():
            events += evs
    full = _usage(alone).ttft_ms / 1000
    assert latency < max(0.1, full / 3), (latency, full)  # not the rest of the prefill
    assert marks["returned"] - start < full
    assert _text(events) == _text(alone)
    assert _usage(events).prompt_tokens == _usage(alone).prompt_tokens


def test_a_reply_set_aside_over_a_stored_state_resumes_as_itself(engine: Any) -> None:
    """The API prompt's state comes back from the disk cache (core.engines.kv_llama),
    which restores only a sliding window's cells for Gemma's SWA layers; a person's turn
    sets the reply aside before its first token (as a cut step now often does). The
    turn and the resumed reply reuse only the shared transcript, which those layers no
    longer held: the reply came out "What is the capital of Japan". Now the context is
    emptied and prefilled whole."""
    def run(rid: str, text: str, tokens: int) -> list[Any]:
        engine.submit(_req(rid, text, tokens))
        events: list[Any] = []
        while engine.has_work():
            for _, evs in engine.step():
                events += evs
        # its state on disk before the next one's: the writer drops a third waiting write
        assert engine._kv.writer.flush()
        return events

    if engine.disk_cache is None:
        pytest.skip("no disk cache on this engine")
    engine._kv = engine.disk_cache
    try:
        long = "Minutes: " + LONG  # its own text: no state stored by another test matches
        run("hello", "Hello!", 2)
        alone = run("long-alone", long, 6)
        run("hello", "Hello!", 2)
        engine.submit(replace(_req("stored", long, 6), report_prompt=True))
        events = [e for _, evs in engine.step() for e in evs]  # counted: the state loaded
        assert engine._active.cached > 300, engine._active.cached
        engine.submit(_req("person4", "What is the capital of France?", 4, interactive=True))
        person: list[Any] = []
        while engine.has_work():
            for rid, evs in engine.step():
                (events if rid == "stored" else person).extend(evs)
    finally:
        engine._kv = None
    assert _text(person).strip()
    assert _text(events) == _text(alone)


async def test_a_turn_sent_during_an_api_prefill_answers_first(bundled_gguf: Path) -> None:
    """One llama.cpp worker prefilling an API prompt: the person's turn sent meanwhile
    gets its first token before the API reply does, and the API reply is the one it gives
    alone. Before, the turn waited for the API prompt's whole prefill and first token."""
    from core.workers.pool import WorkerPool

    # no disk cache: the API prompt's stored state would make its prefill one token
    spec = ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024,
                     options=(("kv_disk_gb", 0),))
    pool = WorkerPool()
    first: dict[str, float] = {}
    read = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def run(request: GenerationRequest) -> str:
        out = []
        async for event in pool.generate("m", request):
            if isinstance(event, PromptRead):  # counted: its prefill is the next step
                read.set()
            if isinstance(event, TextDelta):
                first.setdefault(request.request_id, loop.time())
                out.append(event.text)
        return "".join(out)

    try:
        await pool.load("m", spec, replicas=1)
        await run(_req("other", "Hello!", 2))  # both API runs start from this context
        alone = await run(_req("alone", LONG, 6))
        await run(_req("other", "Hello!", 2))
        api = asyncio.ensure_future(run(replace(_req("api", LONG, 6), report_prompt=True)))
        await asyncio.wait_for(read.wait(), 30)
        await asyncio.sleep(0.05)  # inside its prefill (several hundred ms on 2 cores)
        assert "api" not in first
        person = await asyncio.wait_for(
            run(_req("person", "What is the capital of France?", 4, interactive=True)), 60)
        again = await asyncio.wait_for(api, 60)
    finally:
        await pool.shutdown()
    assert person.strip()
    assert first["person"] < first["api"], "the turn waited for the API prompt's prefill"
    assert again == alone
