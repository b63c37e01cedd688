"""A forced call written as bare JSON: `{"name": .., "arguments": {..}}` and nothing else.

Not a model family of its own: the worker reads a reply this way when a request forced a
tool call (tool_choice "required" or a named tool) on a model whose own call format
cannot be forced, a base model or a family whose calls are not JSON between markers.
The engine then holds the whole reply to that object with a grammar
(core.engines.tool_grammar.GENERIC), as llama.cpp's server does for any model. A reply
that is not such an object after all (cut by max_tokens) is shown as text.
"""

from __future__ import annotations

from core import json_text

from ..scanner import COLLECT, SNIFF, TEXT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, json_call_object


def _sniff(held: str, final: bool) -> str | None:
    stripped = held.lstrip()
    if not stripped:
        return "text" if final else None
    return "json" if stripped[0] == "{" else "text"


def collect(ids: Ids, state: str, enter: str, body: str,
            closer: str | None) -> tuple[list[ParsedEvent], str | None]:
    try:
        obj = json_text.loads(body)
    except ValueError:
        return as_text(body), None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return as_text(body), None
    return [json_call_object(ids, obj, body.strip())], None


GRAMMAR = Grammar(
    "json-call",
    [
        State("start", SNIFF, sniff=_sniff),
        State("text", TEXT),
        State("json", COLLECT),
    ],
    "start",
    collect,
)
