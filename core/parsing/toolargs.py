"""Turning a collected tool-call body into ToolCall events.

Families differ in markup but share a few argument encodings: a JSON object with a name and
arguments, XML-ish parameter tags whose values are strings or JSON, and Python call syntax.
Every helper here is total: bad input becomes a ToolCall with `error` set and `raw` kept,
or text, never an exception, because a model's mistake must not end the stream.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from core import json_text
from core.events import TextDelta, ToolCall

from .scanner import Ids, ParsedEvent

_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]*)"')
_JSON_START = frozenset('{["-0123456789')
_JSON_WORDS = frozenset({"true", "false", "null"})


def call(ids: Ids, name: str, arguments: dict[str, Any], *, call_id: str | None = None) -> ToolCall:
    """A well-formed call."""
    return ToolCall(id=call_id or ids.new(), name=name, arguments=arguments)


def bad_call(ids: Ids, name: str, raw: str, error: str, *, call_id: str | None = None) -> ToolCall:
    """A call whose arguments could not be read: shown with its raw text, never dropped."""
    return ToolCall(id=call_id or ids.new(), name=name, arguments={}, raw=raw, error=error)


def as_text(*parts: str) -> list[ParsedEvent]:
    """Unparseable markup handed back as visible text (content is never lost)."""
    text = "".join(parts)
    return [TextDelta(text)] if text else []


def guess_name(raw: str) -> str:
    """Best-effort tool name from broken JSON, so the card still says what was called."""
    m = _NAME_RE.search(raw)
    return m.group(1) if m else ""


def arguments_dict(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as a dict; models sometimes JSON-encode them twice, or omit them."""
    if value is None:
        return {}, None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}, None
        try:
            value = json_text.loads(text)
        except ValueError as exc:
            return None, f"tool arguments are not valid JSON: {exc}"
    if isinstance(value, dict):
        return value, None
    return None, f"tool arguments must be a JSON object, got {type(value).__name__}"


def json_calls(
    ids: Ids, body: str, arg_keys: tuple[str, ...] = ("arguments", "parameters")
) -> list[ToolCall]:
    """`{"name": .., "arguments": {..}}`, or a JSON list of those, into calls."""
    raw = body.strip()
    try:
        obj = json_text.loads(raw)
    except ValueError as exc:
        return [bad_call(ids, guess_name(raw), raw, f"tool call is not valid JSON: {exc}")]
    items = obj if isinstance(obj, list) else [obj]
    calls: list[ToolCall] = []
    for item in items:
        calls.append(json_call_object(ids, item, raw, arg_keys))
    if not calls:
        return [bad_call(ids, "", raw, "tool call list is empty")]
    return calls


def json_call_object(
    ids: Ids, item: Any, raw: str, arg_keys: tuple[str, ...] = ("arguments", "parameters")
) -> ToolCall:
    """One decoded JSON call object (also accepts OpenAI's {"function": {...}} nesting)."""
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = {**item["function"], "id": item.get("id")}
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return bad_call(ids, "", raw, "tool call has no \"name\" string")
    value: Any = None
    for key in arg_keys:
        if key in item:
            value = item[key]
            break
    args, err = arguments_dict(value)
    call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else None
    if err is not None or args is None:
        return bad_call(ids, item["name"], raw, err or "bad arguments", call_id=call_id)
    return call(ids, item["name"], args, call_id=call_id)


def named_json_call(ids: Ids, name: str, args_text: str, *, call_id: str | None = None) -> ToolCall:
    """A call whose name came from markup and whose arguments are a JSON object."""
    args, err = arguments_dict(args_text)
    if err is not None or args is None:
        return bad_call(ids, name, args_text, err or "bad arguments", call_id=call_id)
    return call(ids, name, args, call_id=call_id)


def xml_value(value: str) -> Any:
    """A parameter value from tag-style formats: JSON when it reads as JSON, else the string.

    Without the tool schema at hand we cannot know a parameter's type, so numbers,
    booleans, objects and lists are decoded and everything else stays a string.
    """
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    text = value.strip()
    if text and (text[0] in _JSON_START or text in _JSON_WORDS):
        try:
            return json_text.loads(text)
        except ValueError:
            return value
    return value


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[node.id]
    return ast.literal_eval(node)


def _call_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _call_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def pythonic_calls(ids: Ids, body: str) -> list[ToolCall] | None:
    """`[f(a=1), g(b="x")]`, `f(a=1)` or `print(f(a=1))` into calls; None if it is not that.

    Only literal keyword arguments are accepted: the text is parsed, never executed.
    """
    raw = body.strip()
    if not raw:
        return None
    try:
        tree = ast.parse(raw, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None  # MemoryError: the parser's own stack, for "-" or "not" nested 10^5 deep
    nodes = tree.elts if isinstance(tree, ast.List | ast.Tuple) else [tree]
    calls: list[ToolCall] = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
        ):
            node = node.args[0]
        if not isinstance(node, ast.Call):
            return None
        name = _call_name(node.func)
        if name is None:
            return None
        try:
            if node.args:
                raise ValueError("positional arguments have no parameter names")
            args = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
        except (ValueError, TypeError, SyntaxError, RecursionError) as exc:
            calls.append(bad_call(ids, name, ast.get_source_segment(raw, node) or raw,
                                  f"tool arguments are not literals: {exc}"))
            continue
        calls.append(call(ids, name, args))
    return calls
