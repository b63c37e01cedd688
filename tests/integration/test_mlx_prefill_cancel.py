"""A long prompt's prefill on MLX is cancellable, and its count comes first (issue 43).

The single path prefilled a prompt's whole uncached part inside one engine step, so a
client that went away during an agent's long prefill kept the worker busy to its end;
now a long prompt is read a chunk per step (core.engines.mlx.chunked) and a cancel lands
between chunks. A request that asks (report_prompt) gets PromptRead before the prefill.
On the real MLX engine with a tiny random-weight model (tests/fixtures/mlx_models.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, PromptRead, TextDelta, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

pytestmark = pytest.mark.slow

STEP = 128  # prefill tokens a step: small, so a short prompt has many chunks


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("chunked") / "tiny", QWEN3_SHAPE)


def _engine(model: Path, **options: Any) -> Any:
    from core.engines.mlx import MlxEngine

    opts = {"warmup_batch_sizes": (1,), "kv_disk_gb": 0, "prefill_step_size": STEP, **options}
    return MlxEngine(ModelSpec(str(model), "mlx", context_size=4096, options=tuple(opts.items())))


@pytest.fixture(scope="module")
def engine(model: Path) -> Iterator[Any]:
    eng = _engine(model)
    yield eng
    eng.close()


class FedCount:
    """Counts the prompt tokens the engine's model is fed (a spy around the real model)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.tokens = 0

    def __call__(self, inputs: mx.array, *args: Any, **kwargs: Any) -> Any:
        self.tokens += inputs.shape[-1]
        return self.model(inputs, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def _long(words: int, tag: str = "") -> str:
    return tag + " ".join(f"item{i} is a word" for i in range(words)) + ". What is item7?"


def _ask(text: str, rid: str, max_tokens: int = 8, report: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": text},),
                             SamplingParams(temperature=0.0, max_tokens=max_tokens),
                             report_prompt=report)


def _run(engine: Any, *requests: GenerationRequest) -> dict[str, list[Any]]:
    for r in requests:
        engine.submit(r)
    out: dict[str, list[Any]] = {}
    while engine.has_work():
        for rid, events in engine.step():
            out.setdefault(rid, []).extend(events)
    return out


def _reply(events: list[Any]) -> tuple[str, Usage]:
    return ("".join(e.text for e in events if isinstance(e, TextDelta)),
            next(e for e in events if isinstance(e, Usage)))


def test_a_cancel_during_a_long_prefill_frees_the_engine(engine: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the step that started the request prefilled all of its ~900 tokens: a
    cancel could only land after. Now it lands after a chunk, and the next request is
    answered at once: far fewer tokens than the long prompt's were ever fed."""
    fed = FedCount(engine._model)
    monkeypatch.setattr(engine, "_model", fed)
    engine.submit(_ask(_long(60), "long"))
    assert [events for _, events in engine.step() if events] == []  # the start, one chunk
    s = engine._single
    assert s is not None and s.at == STEP and len(s.act.prompt) > 5 * STEP
    assert fed.tokens == STEP
    engine.cancel("long")
    events = [e for _, evs in engine.step() for e in evs]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
    assert engine._single is None
    text, _ = _reply(_run(engine, _ask("Say hi.", "next", 4))["next"])
    assert text
    assert fed.tokens < len(s.act.prompt) / 2, fed.tokens


@pytest.mark.parametrize("options", [{}, {"bucketed_prefill": True}], ids=["plain", "bucketed"])
def test_a_chunked_prefill_answers_as_a_whole_one(model: Path, options: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same greedy reply and cached counts as the prompt prefilled in one step (the
    chunks are the same passes), on the plain and the bucketed (GPU) prefill; a request
    cut mid-prefill and sent again starts from what the cut one had read."""
    eng = _engine(model, **options)
    try:
        text = _long(50, "Same. ")
        chunked, usage = _reply(_run(eng, _ask(text, "chunked", 12))["chunked"])
        assert usage.prompt_tokens > 4 * STEP and usage.cached_tokens == 0
        cut = _long(100, "Cut. ")
        eng.submit(_ask(cut, "cut"))
        eng.step()
        eng.step()
        held = eng._single.at
        eng.cancel("cut")
        eng.step()
        _, retry = _reply(_run(eng, _ask(cut, "retry"))["retry"])
        assert retry.cached_tokens >= held >= 2 * STEP, (retry, held)
        eng._prefix.clear()
        monkeypatch.setattr(eng, "_chunk_at", lambda *a: 0)
        whole, usage2 = _reply(_run(eng, _ask(text, "whole", 12))["whole"])
        assert (whole, usage2.cached_tokens) == (chunked, 0) and whole
    finally:
        eng.close()


def test_a_request_arriving_mid_prefill_joins_the_batch(engine: Any) -> None:
    """A short request during a long prefill: the long prompt's rest goes through the
    batch's prefill with the short one, both answer, the long one as it would alone."""
    text = _long(40, "Join. ")
    alone, _ = _reply(_run(engine, _ask(text, "alone", 8))["alone"])
    engine._prefix.clear()
    engine.submit(_ask(text, "long", 8))
    engine.step()
    assert engine._single is not None and engine._single.at is not None
    out = _run(engine, _ask("Say hi.", "short", 4))
    assert _reply(out["short"])[0]
    joined, usage = _reply(out["long"])
    assert joined == alone and usage.cached_tokens == 0


def test_prompt_read_comes_before_the_prefill_when_asked(engine: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """report_prompt: PromptRead(prompt, cached) is the request's first event, in a step
    that fed none of a long prompt; the cached part counts on a next turn; a request that
    does not ask gets none; the batch path sends it too."""
    engine._prefix.clear()
    fed = FedCount(engine._model)
    monkeypatch.setattr(engine, "_model", fed)
    text = _long(40, "Count. ")
    engine.submit(_ask(text, "first", 4, report=True))
    [(rid, events)] = engine.step()
    assert rid == "first" and fed.tokens == 0
    [read] = events
    assert isinstance(read, PromptRead) and read.cached_tokens == 0
    out = _run(engine)
    assert _reply(out["first"])[1].prompt_tokens == read.prompt_tokens > 4 * STEP
    msgs = ({"role": "user", "content": text}, {"role": "assistant", "content": "x"},
            {"role": "user", "content": "And?"})
    for rid, more in (("alone", ()), ("next", (_ask("Other.", "plain", 4),
                                                _ask("Batch.", "batched", 4, True)))):
        follow = GenerationRequest(rid, msgs, SamplingParams(temperature=0.0, max_tokens=4),
                                   report_prompt=True)
        engine.submit(follow)
        if not more:  # a cached turn alone: its count and its first token in one step
            [(_, events)] = engine.step()
            assert [type(e) for e in events][:2] == [PromptRead, TextDelta], events
        out = _run(engine, *more)
        if not more:
            out[rid] = events + out.get(rid, [])
        read = out[rid][0]
        usage = _reply(out[rid])[1]
        assert read == PromptRead(usage.prompt_tokens, usage.cached_tokens)
        assert 0 < read.cached_tokens < read.prompt_tokens
    assert not any(isinstance(e, PromptRead) for e in out["plain"])
    assert isinstance(out["batched"][0], PromptRead)


def test_a_batchs_long_prompts_cancel_between_chunks(engine: Any) -> None:
    """The batch path's admission was cancellable already (BatchGenerator prefills a
    chunk per step): two long prompts cut after a chunk each, far short of their length."""
    engine._prefix.clear()
    before = engine._bg._counters.prompt_tokens
    engine.submit(_ask(_long(60, "One. "), "one"))
    engine.submit(_ask(_long(60, "Two. "), "two"))
    engine.step()
    engine.cancel("one")
    engine.cancel("two")
    out = _run(engine)
    assert all(isinstance(out[r][-1], Done) and out[r][-1].finish_reason == "cancelled"
               for r in ("one", "two")), out
    assert engine._bg._counters.prompt_tokens - before <= 2 * STEP
    assert _reply(_run(engine, _ask("Say hi.", "after", 4))["after"])[0]
