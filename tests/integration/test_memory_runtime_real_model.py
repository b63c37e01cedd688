"""The rollover summary written by the real bundled model (Gemma 3 270M, llama.cpp) when
the context is nearly full: the summarise request must fit the same small window."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.memory.summarise import fallback_summary
from core.memory.window import messages_tokens
from core.runtime import Runtime

pytestmark = pytest.mark.slow


async def test_bundled_model_summarises_a_full_context(bundled_gguf: Path) -> None:
    settings = Settings(model=str(bundled_gguf), context_size=1024)
    settings.sampling.temperature = 0.0
    rt = Runtime(settings)
    await rt.start()
    try:
        assert await rt.ensure_model()
        session = [{"role": "system", "content": "Summary of the conversation so far: the "
                    "user is planning a trip to Lisbon in May with two friends."}]
        for i in range(15):
            session.append({"role": "user", "content": f"Day {i + 1}: we want to visit the "
                            f"museum number {i + 1} and eat at a seafood place near the river."})
            session.append({"role": "assistant", "content": f"For day {i + 1}, start at the "
                            "museum in the morning, then walk to the riverside for lunch."})
        assert messages_tokens(session) > 0.7 * 1024  # what a rollover sees
        summary = await rt.chat.summarise("trip", session)
        assert summary and summary != fallback_summary(session, 10_000)
        assert not summary.startswith("The user asked:")  # written by the model
        assert rt.model.state == "ready"
    finally:
        await rt.close()
