"""A summary written ahead never delays the person's turn on MLX (issue 46 item 4).

A request made beside a conversation (`aside`: its summary written in the background)
decoding alone is set aside, its cache kept, when a turn comes: the turn starts alone on
the single path, and the summary goes on beside it once the turn has its first token (a
step after each of the turn's), its text as if it had never stopped. Before, the turn joined the summary in a batch (a batch built around a
long cache: 1.3-4 s of a turn's first token on a CPU in bench/long_chat.py), and the
summary took its share of every step.

A small random-weight qwen3 in this process (MLX on the CPU).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.mlx import MlxEngine
from core.events import Done, TextDelta, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    folder = build_model_dir(tmp_path_factory.mktemp("qwen3"), QWEN3_SHAPE)
    eng = MlxEngine(ModelSpec(str(folder), "mlx", context_size=2048, options=(
        ("max_concurrency", 8), ("warmup_batch_sizes", (1, 2)), ("kv_disk_gb", 0))))
    yield eng
    eng.close()


def _req(rid: str, text: str, tokens: int, *, aside: bool = False,
         interactive: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": text},),
                             SamplingParams(temperature=0.0, max_tokens=tokens),
                             aside=aside, interactive=interactive)


SUMMARY = "Summarise the conversation so far about the archive and its ledgers. " * 4


def _drain(engine: MlxEngine, log: list[tuple[str, int]] | None = None) -> dict[str, list]:
    events: dict[str, list] = defaultdict(list)
    while engine.has_work():
        for rid, evs in engine.step():
            events[rid].extend(evs)
            if log is not None:
                log.append((rid, sum(isinstance(e, TextDelta) for e in evs)))
    return events


def test_a_summary_in_flight_steps_aside_for_the_turn(engine: MlxEngine) -> None:
    engine.submit(_req("alone", SUMMARY, 40, aside=True))
    alone = _drain(engine)["alone"]
    engine.submit(_req("summary", SUMMARY, 40, aside=True))
    events: dict[str, list] = defaultdict(list)
    while sum(isinstance(e, TextDelta) for e in events["summary"]) < 5:
        for rid, evs in engine.step():
            events[rid].extend(evs)
    engine.submit(_req("turn", "What do you make of the ledgers?", 12, interactive=True))
    log: list[tuple[str, int]] = []
    for rid, evs in _drain(engine, log).items():
        events[rid].extend(evs)
    assert log[0][0] == "turn"  # the turn's first token came in the first step
    turn_end = max(i for i, (rid, _) in enumerate(log) if rid == "turn")
    summary_end = max(i for i, (rid, _) in enumerate(log) if rid == "summary")
    assert turn_end < summary_end  # the turn ended first; the summary went on beside it
    assert isinstance(events["turn"][-1], Done) and isinstance(events["summary"][-1], Done)
    text = "".join(e.text for e in events["summary"] if isinstance(e, TextDelta))
    assert text == "".join(e.text for e in alone if isinstance(e, TextDelta))
    usage = next(e for e in events["summary"] if isinstance(e, Usage))
    assert usage.completion_tokens == next(e for e in alone if isinstance(e, Usage)).completion_tokens


def test_a_summary_set_aside_can_be_cancelled(engine: MlxEngine) -> None:
    engine.submit(_req("s2", SUMMARY, 40, aside=True))
    engine.step()
    engine.step()
    engine.submit(_req("t2", "And the maps?", 30, interactive=True))
    engine.step()  # the summary is set aside, the turn starts
    engine.cancel("s2")
    events = _drain(engine)
    assert events["s2"][-1].finish_reason == "cancelled"
    assert events["t2"][-1].finish_reason in ("stop", "length")


def test_a_summary_that_comes_during_a_turn_waits_for_it(engine: MlxEngine) -> None:
    engine.submit(_req("t3", "Tell me about the harbour towns.", 20, interactive=True))
    engine.step()
    engine.submit(_req("s3", SUMMARY, 10, aside=True))
    log: list[tuple[str, int]] = []
    events = _drain(engine, log)
    end = max(i for i, (rid, _) in enumerate(log) if rid == "t3")
    assert all(rid != "s3" for rid, _ in log[:end])  # nothing of it before the turn ended
    assert isinstance(events["s3"][-1], Done) and events["s3"][-1].finish_reason != "error"


LONG = " ".join(f"ledger {i} of the harbour archive lists the boxes sorted." for i in range(30))


def test_a_turn_waits_for_one_chunk_of_a_summary_prefill_not_all_of_it(engine: MlxEngine) -> None:
    """An aside's long prompt is prefilled a chunk a step: a turn that comes meanwhile
    starts at the next step. Before, the whole prompt went in one step."""
    engine.submit(_req("long-alone", LONG, 8, aside=True))
    steps = 0
    alone: list = []
    while not alone:  # steps until its first token: one per chunk of its prompt
        steps += 1
        alone += [e for rid, evs in engine.step() if rid == "long-alone" for e in evs]
    alone += _drain(engine)["long-alone"]
    assert steps >= 5, steps  # ~1,100 tokens a chunk at a time (all in one step: 3)
    usage = next(e for e in alone if isinstance(e, Usage))
    assert usage.prompt_tokens - usage.cached_tokens > 700, usage
    engine.submit(_req("long", LONG, 8, aside=True))
    first = engine.step()  # its first chunk
    assert not any(rid == "long" for rid, _ in first)
    engine.submit(_req("turn4", "And the maps?", 6, interactive=True))
    log: list[tuple[str, int]] = []
    events = _drain(engine, log)
    assert log[0][0] == "turn4"  # the turn's first token in the next step
    text = "".join(e.text for e in events["long"] if isinstance(e, TextDelta))
    assert text == "".join(e.text for e in alone if isinstance(e, TextDelta))
