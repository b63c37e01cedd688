"""The scripted engine at a slow pace still hears a cancel at once: a step sleeps in short
slices, so the worker reads its pipe between them (a step slept until the next token was
due, 10 s at 0.1 tok/s, and a test's Esc or the app's quit waited that long)."""

from __future__ import annotations

import time

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.scripted import ScriptedEngine
from core.events import Done, TextDelta


def test_a_step_waiting_for_a_slow_token_returns_soon_and_a_cancel_ends_the_reply() -> None:
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=(("reply", "x" * 200), ("tokens_per_s", 0.1), ("chunk_chars", 40)))
    engine = ScriptedEngine(spec)
    engine.submit(GenerationRequest("r", ({"role": "user", "content": "hi"},), SamplingParams()))
    first = engine.step()
    assert first and isinstance(first[0][1][0], TextDelta)  # the first piece, at once
    started = time.monotonic()
    assert engine.step() == []  # the next piece is 10 s away: nothing yet
    assert time.monotonic() - started < 1.0, "a step slept until the next token was due"
    engine.cancel("r")
    (rid, events), = engine.step()
    assert rid == "r" and events[-1] == Done("cancelled")
    assert not engine.has_work()
