"""MiniMax-M2: `<minimax:tool_call><invoke name="x"><parameter name="a">v</parameter></invoke>`."""

from __future__ import annotations

import re

from ..scanner import COLLECT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, bad_call, call, xml_value
from ._common import finished_or_text, think_states

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
_INVOKE_RE = re.compile(r"<invoke\s+name=[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</invoke>|\Z)", re.S)
_PARAM_RE = re.compile(
    r"<parameter\s+name=[\"']?([^\"'>]+)[\"']?\s*>(.*?)(?:</parameter>|(?=<parameter)|\Z)", re.S
)


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    """One block may hold several <invoke>s; each becomes a call."""
    if closer is None and not body.rstrip().endswith("</invoke>"):
        return as_text(enter, body), None  # cut off mid-call: its arguments may be partial
    calls = [
        call(ids, m.group(1).strip(),
             {p.group(1).strip(): xml_value(p.group(2)) for p in _PARAM_RE.finditer(m.group(2))})
        for m in _INVOKE_RE.finditer(body)
    ] or [bad_call(ids, "", body.strip(), "tool call block has no <invoke name=...>")]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


GRAMMAR = Grammar(
    "minimax",
    [*think_states({OPEN: "tool"}), State("tool", COLLECT, {CLOSE: "text"})],
    "text",
    collect,
    reasoning_state="reasoning",
    uses_think=True,
)
