"""An MLX model folder with no chat template is a base model on the MLX engine too: it is
prompted as a transcript, its reply stops at the next turn marker (never shown), and it
gets the base-model repetition penalty."""

from __future__ import annotations

import json
from pathlib import Path

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.base_prompt import BASE_REPETITION_PENALTY, base_format
from core.engines.mlx import MlxEngine
from core.events import Done, TextDelta
from core.hub.base_model import is_base_model
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


def test_a_template_less_mlx_model_is_prompted_as_a_transcript(tmp_path: Path) -> None:
    folder = build_model_dir(tmp_path / "base", QWEN3_SHAPE)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template")
    config_path.write_text(json.dumps(config))
    assert is_base_model(folder)

    engine = MlxEngine(ModelSpec(str(folder), "mlx", options=(("warmup_batch_sizes", (1,)),)))
    try:
        assert engine.info()["base_model"] is True and engine.info()["chat_template"] is None
        request = GenerationRequest("r", ({"role": "user", "content": "Hi"},),
                                    SamplingParams(temperature=0.0, max_tokens=12))
        assert engine.render_text(request) == base_format().render(request.messages)
        act = engine._admit(request)
        assert act.processors, f"no repetition penalty ({BASE_REPETITION_PENALTY}) applied"
        engine.submit(request)
        events = []
        while engine.has_work():
            for _, evs in engine.step():
                events += evs
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert isinstance(events[-1], Done)
        assert "User:" not in text and not text[:1].isspace()
    finally:
        engine.close()
