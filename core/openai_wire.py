"""The parts of the OpenAI chat wire format that both sides of llmdeck speak.

core.server reads requests and writes answers; core.remote writes requests and reads
answers. What both need sits here, below both, so a field spelled one way when sent is
spelled the same way when read, and neither package imports the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.engines.base import ROOM_LEFT, GenerationRequest
from core.events import ERROR_CODES, Error


def tool_call_body(call_id: str, name: str, arguments: Any, raw: str | None = None) -> dict[str, Any]:
    """One tool call in OpenAI's shape; `raw` keeps arguments that were not valid JSON."""
    args = raw if isinstance(raw, str) and not arguments else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def error_event_for(status: int, body: Any, where: str) -> Error:
    """Read an OpenAI-shaped error answer (from any server) back into an events.Error."""
    message, code = "", ""
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            message = str(err.get("message") or "")
            code = str(err.get("code") or "")
        elif isinstance(err, str):
            message = err
    message = message or f"HTTP {status}"
    ours = code.upper()
    if code == "context_length_exceeded":
        ours = "CONTEXT_OVERFLOW"
    if ours not in ERROR_CODES:
        ours = _code_for_status(status)
    hint = {
        401: " Check the API key configured for this remote.",
        403: " Check the API key configured for this remote.",
        404: " Check the model name configured for this remote.",
        429: " The remote is busy; try again in a moment.",
        503: " The remote is not ready (still loading?); try again in a moment.",
    }.get(status, "")
    return Error(ours, f"{where} answered {status}: {message}.{hint}".replace("..", "."))


def _code_for_status(status: int) -> str:
    if status in (400, 422):
        return "BAD_REQUEST"
    if status in (401, 403, 404, 503):
        return "LOAD_FAILED"
    if status in (408, 504):
        return "TIMEOUT"
    if status == 413:
        return "CONTEXT_OVERFLOW"
    return "INTERNAL"


def request_body(request: GenerationRequest, model: str, *, stream: bool = True) -> dict[str, Any]:
    """The chat completions body that asks a remote for `request`."""
    s = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message_out(m) for m in request.messages],
        "stream": stream,
        "temperature": s.temperature,
        "top_p": s.top_p,
    }
    if s.max_tokens < ROOM_LEFT:  # else the remote's own default: the room left in its context
        body["max_tokens"] = s.max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    if s.stop:
        body["stop"] = list(s.stop)
    if s.seed is not None:
        body["seed"] = s.seed
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(s, name):
            body[name] = getattr(s, name)
    if s.logit_bias:
        body["logit_bias"] = {str(t): b for t, b in s.logit_bias}
    if s.json_schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "reply", "schema": json.loads(s.json_schema), "strict": True}}
    if request.tools:
        body["tools"] = list(request.tools)
        if request.tool_name is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": request.tool_name}}
        elif request.tool_choice == "required":
            body["tool_choice"] = "required"
    return body


def _message_out(m: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if k in ("role", "content", "tool_call_id", "name")}
    calls = m.get("tool_calls")
    if calls:
        out["tool_calls"] = [_tool_call_out(c) for c in calls]
    return out


def _tool_call_out(c: Mapping[str, Any]) -> dict[str, Any]:
    """Stored tool calls may be flat ({id, name, arguments: dict}) or OpenAI-shaped."""
    fn = c.get("function") if isinstance(c.get("function"), Mapping) else c
    args = fn.get("arguments", {})
    return tool_call_body(str(c.get("id") or ""), str(fn.get("name", "")),
                          args if not isinstance(args, str) else None,
                          raw=args if isinstance(args, str) else None)
