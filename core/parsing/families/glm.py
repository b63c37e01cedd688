"""GLM-4.5/4.6: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`."""

from __future__ import annotations

import re

from core.events import ToolCall

from ..scanner import COLLECT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, bad_call, call, named_json_call, xml_value
from ._common import finished_or_text, think_states

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_PAIR_RE = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|\Z)", re.S)


def glm_call(ids: Ids, body: str) -> ToolCall:
    head, sep, _ = body.partition("<arg_key>")
    name = head.strip()
    if not sep:
        # No arguments, or (older GLM) a JSON object after the name on the next line.
        name, _, rest = name.partition("\n")
        name = name.strip()
        if rest.strip():
            return named_json_call(ids, name, rest)
    if not name or "\n" in name or "<" in name:
        return bad_call(ids, "", body.strip(), "tool call has no function name")
    args = {m.group(1).strip(): xml_value(m.group(2)) for m in _PAIR_RE.finditer(body)}
    return call(ids, name, args)


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    if closer is None and "<arg_key>" in body and not body.rstrip().endswith("</arg_value>"):
        return as_text(enter, body), None  # cut off mid-call: its arguments may be partial
    calls = [glm_call(ids, body)]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, enter, body)
    return out, None


GRAMMAR = Grammar(
    "glm",
    [*think_states({OPEN: "tool"}), State("tool", COLLECT, {CLOSE: "text"})],
    "text",
    collect,
    reasoning_state="reasoning",
    uses_think=True,
)
