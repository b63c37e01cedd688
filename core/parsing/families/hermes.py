"""Hermes / Qwen2.5 style: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`."""

from __future__ import annotations

from dataclasses import replace

from ..argstream import ArgumentStream
from ..scanner import COLLECT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text
from ._common import finished_or_text, think_states, tool_call_body

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_STREAM = "arguments"  # Ids.memo key of the block's ArgumentStream


def stream(ids: Ids, state: str, piece: str) -> list[ParsedEvent]:
    """Deltas of a JSON call body as it is written (core.parsing.argstream)."""
    follower = ids.memo.get(_STREAM)
    if follower is None:
        follower = ids.memo[_STREAM] = ArgumentStream(ids.new())
    return list(follower.feed(piece))


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    """Parse one tool_call block; one cut off at the end stays text unless it parses."""
    follower = ids.memo.pop(_STREAM, None)
    if closer is None and "<function=" in body and not body.rstrip().endswith("</function>"):
        return as_text(enter, body), None  # cut off mid-call: its arguments may be partial
    calls = tool_call_body(ids, body)
    if follower is not None and follower.announced and calls:
        calls[0] = replace(calls[0], id=follower.id)  # the id its deltas went out with
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


def grammar(name: str = "hermes") -> Grammar:
    # Hermes-format models include reasoning ones (QwQ), so <think> is split here too.
    states = [*think_states({OPEN: "tool"}), State("tool", COLLECT, {CLOSE: "text"})]
    return Grammar(name, states, "text", collect, reasoning_state="reasoning",
                   uses_think=name != "hermes", stream=stream)


GRAMMAR = grammar()
