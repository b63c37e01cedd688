"""Llama 3.1+: `<|python_tag|>{"name": .., "parameters": {..}}` or a bare JSON call.

With JSON tool calling the model answers with nothing but the call object, so a reply
whose first non-blank character is `{` is held until the end and read as calls; if it is
not a call after all it is shown as text. Built-in tools use `<|python_tag|>` with either
JSON or `brave_search.call(query="...")`.
"""

from __future__ import annotations

import json

from core.events import ToolCall

from ..scanner import COLLECT, SNIFF, TEXT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, bad_call, json_call_object, json_calls, pythonic_calls

TAG = "<|python_tag|>"
ENDS = {"<|eom_id|>": "text", "<|eot_id|>": "text"}


def _sniff(held: str, final: bool) -> str | None:
    stripped = held.lstrip()
    if not stripped:
        return "text" if final else None
    return "json" if stripped[0] == "{" else "text"


def _split_json(body: str) -> list[dict] | None:
    """Call objects, several separated by ';' in one message, or None if it is not that."""
    decoder = json.JSONDecoder()
    objs: list[dict] = []
    pos, n = 0, len(body)
    while True:
        while pos < n and body[pos] in " \t\r\n;":
            pos += 1
        if pos >= n:
            break
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except (ValueError, RecursionError):  # RecursionError: nested ~1,000 deep
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        if "parameters" not in obj and "arguments" not in obj:
            return None
        objs.append(obj)
    return objs or None


def _calls(ids: Ids, objs: list[dict]) -> list[ToolCall]:
    return [json_call_object(ids, obj, json.dumps(obj)) for obj in objs]


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    if state == "json":
        objs = _split_json(body)
        if objs is None:
            return as_text(body), None
        return list(_calls(ids, objs)), None
    # <|python_tag|> body
    stripped = body.strip()
    objs = _split_json(stripped)
    if objs is not None:
        return list(_calls(ids, objs)), None
    calls = pythonic_calls(ids, stripped)
    if calls is not None:
        calls = [
            ToolCall(c.id, c.name.removesuffix(".call"), c.arguments, c.raw, c.error) for c in calls
        ]
    elif stripped.startswith("{"):
        calls = json_calls(ids, stripped)
    else:
        calls = [bad_call(ids, "", stripped, "python_tag body is neither JSON nor a call")]
    out: list[ParsedEvent] = list(calls)
    if closer is None and not stripped:
        out = as_text(enter)
    return out, None


GRAMMAR = Grammar(
    "llama3",
    [
        State("start", SNIFF, sniff=_sniff),
        State("text", TEXT, {TAG: "tool"}),
        State("json", COLLECT, dict(ENDS)),
        State("tool", COLLECT, dict(ENDS)),
    ],
    "start",
    collect,
)
