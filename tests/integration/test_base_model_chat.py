"""The bundled Gemma 3 270M is a base model: with the transcript prompt it answers like a
chat. Real GGUF, one real worker, greedy: each everyday question gets a reply that ends by
itself within MAX_TOKENS and repeats no sentence, and the capital of France is Paris."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.events import Done, TextDelta, Usage
from core.runtime import Runtime
from tests.fixtures.everyday_questions import MAX_TOKENS, QUESTIONS, judge


@pytest.mark.slow  # ~150 tokens in all: 5-20 s on 2 cores, 90 s when they are busy
async def test_the_bundled_base_model_answers_everyday_questions(bundled_gguf: Path) -> None:
    s = Settings(model=str(bundled_gguf), context_size=1024, replicas=1)
    s.sampling.temperature = 0.0
    s.sampling.max_tokens = MAX_TOKENS
    rt = Runtime(s)
    await rt.start()
    try:
        assert await rt.ensure_model()
        assert rt.model.info["base_model"] is True
        failures = []
        for question in QUESTIONS:
            turn = await rt.start_turn(None, question)
            events = [e async for e in turn.events()]
            reply = "".join(e.text for e in events if isinstance(e, TextDelta))
            done = events[-1]
            usage = next(e for e in events if isinstance(e, Usage))
            assert isinstance(done, Done)
            verdict = judge(question, reply, done.finish_reason, usage.completion_tokens)
            verdict["no_marker"] = "User:" not in reply and "Assistant:" not in reply
            if not all(v for k, v in verdict.items() if k != "correct" or "France" in question):
                failures.append((question, reply, done.finish_reason, verdict))
        assert failures == []
    finally:
        await rt.close()


def test_a_request_with_its_own_penalty_window_is_not_refused(bundled_gguf: Path) -> None:
    """The base default must not add a second penalty window to a presence penalty's
    (llama.cpp has one window for all penalties and refuses a request with two)."""
    from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
    from core.engines.llamacpp import LlamaCppEngine
    from core.events import Error

    engine = LlamaCppEngine(ModelSpec(str(bundled_gguf), "llamacpp", context_size=512))
    try:
        sampling = SamplingParams(temperature=0.0, max_tokens=4, presence_penalty=0.5,
                                  presence_context_size=32)
        engine.submit(GenerationRequest("p", ({"role": "user", "content": "Hi"},), sampling))
        events = []
        while engine.has_work():
            for _, evs in engine.step():
                events += evs
        assert not [e for e in events if isinstance(e, Error)], events
        assert isinstance(events[-1], Done) and events[-1].finish_reason in ("stop", "length")
    finally:
        engine.close()
