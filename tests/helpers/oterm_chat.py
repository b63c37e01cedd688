"""One oterm chat turn, run by oterm's own Python (not the project's): the calls its TUI
makes, through its own code.

oterm has no one-shot mode, so tests/integration/test_agent_clis.py runs this with the
interpreter of the environment oterm was installed into. It does what oterm's new-chat
dialog and chat widget do: load its tools, list the models (/api/tags), show the picked one (/api/show:
its capabilities decide whether tools are offered), build oterm's agent with its `shell`
tool (chat over Ollama's OpenAI-compatible /v1), stream one turn as the chat widget does
(Agent.iter, node streams; the tool is run by the agent), then ask the running context
(/api/ps). Prints one JSON line; imports nothing from llmdeck.

Usage: OLLAMA_URL=http://127.0.0.1:PORT python oterm_chat.py MODEL PROMPT
"""

from __future__ import annotations

import asyncio
import json
import sys


async def _turn(model: str, prompt: str, tools_on: bool, window: int | None) -> dict:
    from oterm.agent import get_agent
    from oterm.app.widgets.chat import _resolve_tools
    from oterm.tools import load_tools
    from pydantic_ai import Agent
    from pydantic_ai.messages import TextPartDelta, ToolReturnPart

    await load_tools()  # as the app does at start: its entry-point tools, MCP servers
    tools, toolsets, capabilities = _resolve_tools(["shell"] if tools_on else [])
    agent = get_agent(provider="ollama", model=model, tools=tools, toolsets=toolsets,
                      capabilities=capabilities, context_window=window)
    streamed: list[str] = []
    returns: list[str] = []
    async with agent.iter(prompt) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for event in stream:
                        delta = getattr(event, "delta", None)
                        if isinstance(delta, TextPartDelta):
                            streamed.append(delta.content_delta)
            elif Agent.is_call_tools_node(node):
                async with node.stream(run.ctx) as stream:
                    async for event in stream:
                        part = getattr(event, "part", None)
                        if isinstance(part, ToolReturnPart):
                            returns.append(str(part.content))
    assert run.result is not None
    return {"reply": run.result.output, "tool_returns": returns,
            "usage": run.result.usage.input_tokens}


def main() -> None:
    from oterm.providers import ollama
    from oterm.providers.capabilities import get_capabilities

    model, prompt = sys.argv[1], sys.argv[2]
    names = [m.model for m in ollama.list_models().models]
    caps = get_capabilities("ollama", model)
    window = ollama.running_context_length(model)
    out = asyncio.run(_turn(model, prompt, caps.supports_tools, window))
    out |= {"models": names, "tools": caps.supports_tools,
            "context": ollama.running_context_length(model)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
