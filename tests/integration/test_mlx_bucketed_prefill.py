"""Bucketed prefill (the GPU's path: fixed chunk shapes, a padded last piece) changes nothing
a user can see: the same greedy tokens and cached-token counts as the plain path, for fresh
prompts and cached turns whose new-token counts fall on and between the bucket edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import TextDelta, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

pytestmark = pytest.mark.slow


def _run(engine: Any, messages: list[dict[str, str]], rid: str) -> tuple[str, int, int]:
    engine.submit(GenerationRequest(rid, tuple(messages), SamplingParams(temperature=0.0, max_tokens=10)))
    text, usage = "", None
    while engine.has_work():
        for _, events in engine.step():
            for event in events:
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, Usage):
                    usage = event
    assert usage is not None
    return text, usage.prompt_tokens, usage.cached_tokens


def _session(engine: Any) -> list[tuple[str, int, int]]:
    out = []
    messages = [{"role": "system", "content": "Be brief. " * 120}]
    for turn, words in enumerate([1, 3, 40, 120]):  # new-token counts 1 to ~250
        messages.append({"role": "user", "content": "count " * words})
        out.append(_run(engine, messages, f"turn-{turn}"))
        messages.append({"role": "assistant", "content": out[-1][0]})
    out.append(_run(engine, messages[:-1], "regenerate"))
    for words in (1, 30, 33, 255, 300):  # fresh prompts across the 32 and 256 edges
        out.append(_run(engine, [{"role": "user", "content": "x " * words}], f"fresh-{words}"))
    return out


def test_bucketed_prefill_gives_the_same_tokens_and_cache_hits(tmp_path: Path) -> None:
    from core.engines.mlx import MlxEngine

    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    results = []
    for bucketed in (False, True):
        spec = ModelSpec(str(model), "mlx", context_size=4096,
                         options=(("warmup_batch_sizes", (1,)), ("bucketed_prefill", bucketed),
                                  ("warmup_prefill", bucketed),
                                  # both start cold: not warm from the other's disk cache
                                  ("kv_disk_gb", 0)))
        engine = MlxEngine(spec)
        try:
            results.append(_session(engine))
        finally:
            engine.close()
    plain, bucketed = results
    assert bucketed == plain
    assert any(cached > 500 for _, _, cached in plain)  # the turns really were cached
