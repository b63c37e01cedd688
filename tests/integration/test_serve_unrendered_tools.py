"""A tools block the model's chat template never renders is not counted against its
context (issue 43 item 6): an agent's tool list can be most of its request, and a model
whose template has no tools (Gemma 3's, a base model's transcript) never reads it.

Before, serve's size check counted the tools' characters: an agent's request to a model
with a small context was refused as too long although its prompt fit. A real server over
a real worker (the scripted engine, a 512-token context, a template without tools).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from core.engines.base import GenerationRequest, ModelSpec
from core.server.limits import renders_no_tools
from tests.fixtures.serve import ServerThread, served

TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "Does one thing with its input, carefully. " * 14,
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}} for i in range(60)]
ASK = [{"role": "user", "content": "Say hi."}]


def _spec(template: str) -> ModelSpec:
    return ModelSpec("plain", "scripted", context_size=512,
                     options=(("label", "plain"), ("template", template), ("reply", "Hi.")))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(_spec("{{ messages }}"), tmp_path_factory.mktemp("unrendered-home"))


def test_tools_a_template_leaves_out_do_not_count_against_the_context(server: ServerThread) -> None:
    assert sum(len(str(t)) for t in TOOLS) > 512 * 64  # more than the context could ever hold
    reply = httpx.post(server.url + "/chat/completions", timeout=60, json={
        "model": "plain", "messages": ASK, "tools": TOOLS})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "Hi."
    forced = httpx.post(server.url + "/chat/completions", timeout=60, json={
        "model": "plain", "messages": ASK, "tools": TOOLS, "tool_choice": "required"})
    assert forced.status_code == 400, forced.text  # written into the prompt: they count
    assert forced.json()["error"]["code"] == "context_length_exceeded"


def test_which_requests_render_no_tools() -> None:
    ask = GenerationRequest("r", tuple(ASK), tools=tuple(TOOLS))
    assert renders_no_tools(ask, {"chat_template": "{{ messages }}"})
    assert renders_no_tools(ask, {"base_model": True, "chat_template": None})
    assert not renders_no_tools(ask, {"chat_template": "{% for t in tools %}{% endfor %}"})
    assert not renders_no_tools(ask, {})  # not known (a remote): counted
    assert not renders_no_tools(GenerationRequest("r", tuple(ASK), tools=tuple(TOOLS),
                                                  tool_name="tool_1"), {"chat_template": "x"})
