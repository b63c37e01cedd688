"""LFM2: `<|tool_call_start|>[name(arg="v"), other(n=1)]<|tool_call_end|>` (Python syntax)."""

from __future__ import annotations

from ..scanner import COLLECT, Grammar, Ids, ParsedEvent, State
from ..toolargs import bad_call, json_calls, pythonic_calls
from ._common import finished_or_text, think_states

OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    stripped = body.strip()
    calls = pythonic_calls(ids, stripped)
    if calls is None:
        # LFM2 writes JSON instead when the system prompt asks for JSON output.
        if stripped.startswith(("{", "[{")):
            calls = json_calls(ids, stripped)
        else:
            calls = [bad_call(ids, "", stripped, "tool call is not a Python call list")]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


GRAMMAR = Grammar(
    "lfm2",
    [*think_states({OPEN: "tool"}), State("tool", COLLECT, {CLOSE: "text"})],
    "text",
    collect,
    reasoning_state="reasoning",
    uses_think=True,
)
