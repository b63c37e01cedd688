"""Mistral: `[TOOL_CALLS][{"name": .., "arguments": {..}}]` (v3/v7 tokenizers) and
`[TOOL_CALLS]name[ARGS]{..}` repeated per call (v11+), plus Magistral's [THINK] blocks.

A tool-call block has no closing marker: it runs to the next [TOOL_CALLS] or the end of
the stream, so the end of the stream is its normal end, not a malformed one.
"""

from __future__ import annotations

from ..scanner import COLLECT, REASONING, Grammar, Ids, ParsedEvent, State
from ..toolargs import bad_call, json_calls, named_json_call
from ._common import THINK_CLOSE, think_states

CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
THINK_B, THINK_B_CLOSE = "[THINK]", "[/THINK]"


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    stripped = body.strip()
    if not stripped:
        return [], None
    out: list[ParsedEvent]
    if stripped[0] in "[{":
        out = list(json_calls(ids, stripped))
        return out, None
    head, sep, args = stripped.partition(ARGS)
    name, _, call_id = head.partition(CALL_ID)
    if not sep or not name.strip():
        return [bad_call(ids, name.strip(), stripped, "tool call has no [ARGS] section")], None
    return [named_json_call(ids, name.strip(), args, call_id=call_id.strip() or None)], None


_text, _reasoning = think_states({CALLS: "tool", THINK_B: "think_b", THINK_B_CLOSE: "text"})

GRAMMAR = Grammar(
    "mistral",
    [
        _text,
        _reasoning,
        State("think_b", REASONING, {THINK_B_CLOSE: "text", THINK_CLOSE: "text"}),
        State("tool", COLLECT, {CALLS: "tool", "</s>": "text"}),
    ],
    "text",
    collect,
    reasoning_state="think_b",
    uses_think=True,
    id_style="mistral",
)
