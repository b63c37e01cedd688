"""Pieces several family grammars share: the <think> states and tool-body readers."""

from __future__ import annotations

import re
from collections.abc import Callable

from core.events import ToolCall

from ..scanner import COLLECT, REASONING, TEXT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, bad_call, call, json_calls, xml_value

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def think_states(text_exits: dict[str, str]) -> list[State]:
    """Text and <think> reasoning states; a stray </think> in text is dropped, not shown.

    The stray close happens when the template opened the think block in the prompt but the
    caller did not say so (in_reasoning=False): the markup still must not leak.
    """
    return [
        State("text", TEXT, {THINK_OPEN: "reasoning", THINK_CLOSE: "text", **text_exits}),
        State("reasoning", REASONING, {THINK_CLOSE: "text"}),
    ]


_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.S)
_PARAMETER_RE = re.compile(
    r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)", re.S
)


def xml_function_calls(ids: Ids, body: str) -> list[ToolCall]:
    """Qwen3-Coder's `<function=name><parameter=p>v</parameter></function>` body."""
    calls: list[ToolCall] = []
    for fm in _FUNCTION_RE.finditer(body):
        params = {
            pm.group(1).strip(): xml_value(pm.group(2)) for pm in _PARAMETER_RE.finditer(fm.group(2))
        }
        calls.append(call(ids, fm.group(1).strip(), params))
    return calls or [bad_call(ids, "", body.strip(), "tool call has no <function=...> block")]


def tool_call_body(ids: Ids, body: str) -> list[ToolCall]:
    """A `<tool_call>` body: JSON (hermes/qwen) or XML functions (qwen3-coder and newer)."""
    if body.lstrip().startswith("<function="):
        return xml_function_calls(ids, body)
    return json_calls(ids, body)


def finished_or_text(calls: list[ToolCall], *text: str) -> list[ParsedEvent]:
    """For a block cut off at the end of the stream: keep it as calls only if all parsed."""
    if calls and all(c.error is None for c in calls):
        return list(calls)
    return as_text(*text)


def sectioned_calls_grammar(
    name: str, markers: tuple[str, str, str, str], parse_call: Callable[[Ids, str], ToolCall]
) -> Grammar:
    """Text and <think>, then a section of calls, each between its own begin/end markers.

    `markers` are (section begin, section end, call begin, call end); `parse_call` reads
    one call's body. A section may also be entered straight at a call's begin marker.
    Whitespace between calls is dropped; anything else there stays visible as text.
    """
    section_begin, section_end, call_begin, call_end = markers

    def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
        if state == "section":
            return as_text(body) if body.strip() else [], None
        calls = [parse_call(ids, body)]
        out = list(calls) if closer is not None else finished_or_text(calls, enter, body)
        return out, None

    return Grammar(
        name,
        [
            *think_states({section_begin: "section", call_begin: "call"}),
            State("section", COLLECT, {call_begin: "call", section_end: "text"}),
            State("call", COLLECT, {call_end: "section"}),
        ],
        "text",
        collect,
        reasoning_state="reasoning",
        uses_think=True,
    )
