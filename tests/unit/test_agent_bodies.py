"""What agents send, translated for the chat templates (issue 43): Claude Code's system
turns inside `messages`, Anthropic's usage with cached tokens apart, Codex's namespace
tools flattened and named back, hosted tools left out."""

from __future__ import annotations

import pytest

from core.events import Usage
from core.server.anthropic import _usage
from core.server.anthropic import chat_body as messages_body
from core.server.responses import Namespaces
from core.server.responses import chat_body as responses_body
from core.server.wire import ApiError


def _messages(*messages: dict, system: str | None = None) -> list[dict]:
    body = {"model": "m", "max_tokens": 10, "messages": list(messages)}
    if system is not None:
        body["system"] = system
    return messages_body(body)["messages"]


def test_a_system_turn_before_the_first_answer_joins_the_system_prompt() -> None:
    out = _messages({"role": "user", "content": "hi"},
                    {"role": "system", "content": [{"type": "text", "text": "Agents: a, b."}]},
                    system="You are Claude Code.")
    assert out == [{"role": "system", "content": "You are Claude Code.\n\nAgents: a, b."},
                   {"role": "user", "content": "hi"}]


def test_a_later_system_turn_joins_the_user_turn_beside_it() -> None:
    """The conversation before it keeps its cached prefix."""
    out = _messages({"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                    {"role": "user", "content": "more"}, {"role": "system", "content": "Note."})
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[2]["content"] == "more\n\nNote."
    out = _messages({"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                    {"role": "system", "content": "Note."}, {"role": "user", "content": "more"})
    assert out[2] == {"role": "user", "content": "Note.\n\nmore"}


def test_system_turns_alone_are_refused_with_a_sentence() -> None:
    with pytest.raises(ApiError, match="needs a user turn"):
        _messages({"role": "system", "content": "x"})


def test_what_does_not_apply_is_ignored_not_refused() -> None:
    body = {"model": "m", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "adaptive"}, "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}
    assert messages_body(body)["max_tokens"] == 32000


def test_anthropic_input_tokens_leave_out_the_cached_ones() -> None:
    """The same system prompt twice gave input_tokens 1215 and cache_read 1214."""
    usage = _usage(Usage(prompt_tokens=1215, cached_tokens=1214, completion_tokens=9,
                         ttft_ms=1.0, decode_tps=1.0))
    assert usage == {"input_tokens": 1, "output_tokens": 9, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 1214}


def test_namespace_tools_are_flattened_and_hosted_ones_left_out() -> None:
    names, ignored = Namespaces(), []
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
             {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [
                 {"type": "function", "name": "close_agent", "description": "Close one.",
                  "parameters": {"type": "object"}},
                 {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]},
             {"type": "web_search", "external_web_access": False}]
    body = {"model": "m", "tools": tools, "input": [
        {"type": "function_call", "call_id": "c1", "name": "close_agent", "namespace": "agents",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "closed"}]}
    chat = responses_body(body, [], names, ignored)
    flat = [t["function"]["name"] for t in chat["tools"]]
    assert flat == ["exec_command", "close_agent", "agents__exec_command"]
    assert chat["tools"][1]["function"]["description"] == "(agents: Sub-agents.) Close one."
    assert ignored == ["web_search"]
    assert chat["messages"][0]["tool_calls"][0]["function"]["name"] == "close_agent"
    assert names.item_fields("close_agent") == {"name": "close_agent", "namespace": "agents"}
    assert names.item_fields("agents__exec_command") == {"name": "exec_command",
                                                         "namespace": "agents"}
    assert names.item_fields("exec_command") == {"name": "exec_command"}
