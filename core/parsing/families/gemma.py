"""Gemma: tool calls as a ```tool_code fenced block of Python calls (Google's prompt recipe).

Gemma's template declares no tool markup of its own; the documented function-calling
prompt asks for `print(name(a=1))` or `name(a=1)` inside ```tool_code ... ```.
"""

from __future__ import annotations

from ..scanner import COLLECT, TEXT, Grammar, Ids, ParsedEvent, State
from ..toolargs import bad_call, pythonic_calls
from ._common import finished_or_text

OPEN, CLOSE = "```tool_code", "```"


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    calls = pythonic_calls(ids, body)
    if calls is None:
        calls = [bad_call(ids, "", body.strip(), "tool_code block is not a Python call")]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


GRAMMAR = Grammar(
    "gemma",
    [State("text", TEXT, {OPEN: "tool"}), State("tool", COLLECT, {CLOSE: "text"})],
    "text",
    collect,
)
