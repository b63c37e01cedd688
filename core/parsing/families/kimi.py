"""Kimi K2: sections of `<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{..}`.

The model writes its own call id (`functions.name:N`); it is kept as the ToolCall id
because the template expects it back on the tool result.
"""

from __future__ import annotations

from core.events import ToolCall

from ..scanner import COLLECT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, bad_call, named_json_call
from ._common import finished_or_text, think_states

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


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    if state == "section":
        return as_text(body) if body.strip() else [], None
    calls = [kimi_call(ids, body)]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


GRAMMAR = Grammar(
    "kimi",
    [
        *think_states({SECTION_BEGIN: "section", CALL_BEGIN: "call"}),
        State("section", COLLECT, {CALL_BEGIN: "call", SECTION_END: "text"}),
        State("call", COLLECT, {CALL_END: "section"}),
    ],
    "text",
    collect,
    reasoning_state="reasoning",
    uses_think=True,
)
