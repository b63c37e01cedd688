"""Kimi K2: sections of `<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{..}`.

The model writes its own call id (`functions.name:N`); it is kept as the ToolCall id
because the template expects it back on the tool result.
"""

from __future__ import annotations

from core.events import ToolCall

from ..scanner import Ids
from ..toolargs import bad_call, named_json_call
from ._common import sectioned_calls_grammar

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARGS = "<|tool_call_argument_begin|>"


def kimi_call(ids: Ids, body: str) -> ToolCall:
    head, sep, args = body.partition(ARGS)
    call_id = head.strip()
    if not sep or not call_id:
        return bad_call(ids, "", body.strip(), "tool call has no id or argument marker")
    name = call_id.split(":", 1)[0]
    name = name.removeprefix("functions.")
    return named_json_call(ids, name, args, call_id=call_id)


GRAMMAR = sectioned_calls_grammar(
    "kimi", (SECTION_BEGIN, SECTION_END, CALL_BEGIN, CALL_END), kimi_call
)
