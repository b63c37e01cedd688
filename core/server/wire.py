"""The OpenAI chat wire format as the server reads and answers it: requests in, chunks and
errors out.

What the remote backend needs too (the request body it sends, reading an error back, the
tool-call shape) lives one floor down in core.openai_wire, so core.remote never reaches up
into the server.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import json_text
from core.config import Sampling
from core.engines.base import ROOM_LEFT, GenerationRequest, SamplingParams
from core.events import Error, Usage

# events.Error code -> HTTP status the server answers with (before the stream starts).
STATUS_FOR_CODE: dict[str, int] = {
    "BAD_REQUEST": 400,
    "CONTEXT_OVERFLOW": 400,
    "UNSUPPORTED": 400,
    "LOAD_FAILED": 503,
    "TIMEOUT": 504,
    # the service stopped the generation itself (its model unloaded for another, or the
    # service closing): a client that hung up gets no answer at all, so this one retries
    "CANCELLED": 503,
    "OOM": 500,
    "MODEL_CORRUPT": 500,
    "WORKER_CRASHED": 500,
    "INTERNAL": 500,
}

_ROLES = {"system", "developer", "user", "assistant", "tool"}


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type_: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _type_for(status)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}


def _type_for(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error",
            404: "not_found_error", 408: "invalid_request_error", 413: "invalid_request_error",
            429: "rate_limit_error", 503: "service_unavailable"}.get(status, "server_error")


# The chat window's advice after a worker crash; an API client has no "reply so far".
_CHAT_ADVICE = re.compile(r"\s*The reply so far was kept; send again to retry\.")
_CHAT_CONTEXT_ADVICE = re.compile(r"[.;]\s*(?:Start a new chat|start a new conversation)[^.]*\.")


def api_error_for(event: Error) -> ApiError:
    """The HTTP error for an engine error that arrived before any output was sent."""
    code = "context_length_exceeded" if event.code == "CONTEXT_OVERFLOW" else event.code.lower()
    message = event.message
    if event.code == "WORKER_CRASHED":
        # True of a local model (its worker is respawned) and of a remote or a cluster
        # (which the person checks and retries), so no promise about who restarts what.
        message = (_CHAT_ADVICE.sub("", message).rstrip(". ") + ". This request was not completed; "
                   "retry the request (a local model's worker restarts by itself).")
    elif event.code == "CONTEXT_OVERFLOW":
        message = (_CHAT_CONTEXT_ADVICE.sub(".", message) + " Send fewer or shorter messages, or "
                   "serve the model with a larger context size.")
    return ApiError(STATUS_FOR_CODE.get(event.code, 500), message, code=code)


# -- requests in -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatCall:
    """A validated /v1/chat/completions body."""

    model: str
    request: GenerationRequest
    stream: bool
    include_usage: bool
    one_call: bool = False  # parallel_tool_calls false: at most one call (core.server.one_call)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value" if param else None)


def _number(body: Mapping[str, Any], name: str, default: float, *, integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise _bad(f"'{name}' must be {kind} (got {json.dumps(value)[:40]}).", name)
    return value


def _text_of(content: Any, where: str) -> str | list[dict[str, Any]]:
    """Message content as text: a string, or a list of text parts. With `image_url` parts
    it stays a list (text parts joined where they touch) for core.server.images, which
    turns each image into a stored file or refuses it, before anything is tokenised."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out: list[dict[str, Any]] = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            if kind in ("text", "input_text"):
                text = str(part.get("text", ""))
                if out and out[-1]["type"] == "text":
                    out[-1] = {"type": "text", "text": out[-1]["text"] + text}
                else:
                    out.append({"type": "text", "text": text})
            elif kind == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                if not isinstance(url, str) or not url:
                    raise _bad(f"{where}[{j}].image_url must be {{url: 'data:image/png;base64,"
                               "...'}.", f"{where}[{j}].image_url")
                out.append({"type": "image_url", "image_url": {"url": url}})
            else:
                raise _bad(f"{where}: content part of type {kind!r} is not supported; "
                           "send text and image_url parts only.", where)
        if all(p["type"] == "text" for p in out):
            return "".join(p["text"] for p in out)
        return out
    raise _bad(f"{where}: content must be a string or a list of text parts.", where)


def _messages(raw: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list) or not raw:
        raise _bad("'messages' must be a non-empty list of {role, content} objects.", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise _bad(f"{where} must be an object with 'role' and 'content'.", where)
        role = m.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise _bad(f"{where}.role must be one of {sorted(_ROLES)} (got {json.dumps(role)[:40]}).",
                       f"{where}.role")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": _text_of(m.get("content"), f"{where}.content")}
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise _bad(f"{where}.tool_calls must be a list of {{id, type: 'function', "
                           "function: {name, arguments}} objects.", f"{where}.tool_calls")
            msg["tool_calls"] = [_tool_call_in(tc, f"{where}.tool_calls[{j}]")
                                 for j, tc in enumerate(m["tool_calls"])]
        if role == "tool":
            if m.get("tool_call_id") is not None:
                msg["tool_call_id"] = str(m["tool_call_id"])
            if m.get("name"):
                msg["name"] = str(m["name"])
        out.append(msg)
    return tuple(out)


def _tool_call_in(tc: Any, where: str) -> dict[str, Any]:
    """An assistant tool call from history; arguments become a dict for chat templates."""
    fn = tc.get("function") if isinstance(tc, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise _bad(f"{where} must be {{id, type: 'function', function: {{name, arguments}}}}.", where)
    args: Any = fn.get("arguments") or {}
    if not isinstance(args, str | Mapping):
        raise _bad(f"{where}.function.arguments must be a JSON string or an object.",
                   f"{where}.function.arguments")
    if isinstance(args, str):
        try:
            args = json_text.loads(args) if args.strip() else {}
        except ValueError:
            pass  # keep the string; the template renders it as is
    return {"id": str(tc.get("id") or ""), "type": "function",
            "function": {"name": fn["name"], "arguments": args}}


def _tools(raw: Any, choice: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad("'tools' must be a list of {type: 'function', function: {...}} objects.", "tools")
    for i, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if (not isinstance(tool, Mapping) or tool.get("type", "function") != "function"
                or not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]):
            raise _bad(f"tools[{i}] must be {{type: 'function', function: {{name, description, "
                       "parameters}}}}.", f"tools[{i}]")
        _check_parameters(fn.get("parameters"), f"tools[{i}].function.parameters")
    return () if choice == "none" else tuple(dict(t) for t in raw)


def _check_parameters(params: Any, where: str) -> None:
    """A tool's parameters must be a JSON schema object that compiles: a string, a list or
    a schema with a wrong keyword would otherwise reach the chat template and the call
    grammar, which read it as no schema (or fail mid-reply)."""
    if params is None:
        return  # no parameters: the tool takes none
    if not isinstance(params, Mapping):
        kind = ("a string" if isinstance(params, str) else "a list" if isinstance(params, list)
                else "true or false" if isinstance(params, bool) else "a number")
        raise _bad(f"{where} must be a JSON schema object, like {{\"type\": \"object\", "
                   f"\"properties\": {{...}}}}; got {kind}.", where)
    from core.server.tool_schemas import known_problem

    problem = known_problem(params)  # checked off the loop at the edge, kept by content
    if problem is not None:
        raise _bad(f"{where} is not a valid JSON schema: {problem}.", where)


def _tool_choice(choice: Any, tools: Any) -> dict[str, Any]:
    """tool_choice as GenerationRequest fields: "auto" (the default) and "none" leave the
    model free; "required" or {"type": "function", "function": {"name": ...}} make the
    reply start with a call (to that tool), enforced while decoding."""
    if choice is None or choice in ("auto", "none"):
        return {}
    if choice == "required":
        if not tools:
            raise _bad("tool_choice 'required' needs 'tools' to choose from.", "tool_choice")
        return {"tool_choice": "required"}
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or not name or choice.get("type", "function") != "function":
        raise _bad("'tool_choice' must be \"auto\", \"none\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}.", "tool_choice")
    offered = [t.get("function", {}).get("name") for t in tools or () if isinstance(t, Mapping)]
    if name not in offered:
        raise _bad(f"tool_choice names {name!r}, which is not among the offered tools.", "tool_choice")
    return {"tool_choice": "required", "tool_name": name}


def _response_schema(body: Mapping[str, Any]) -> str | None:
    """response_format as the JSON schema (text) the engine enforces while decoding.

    {"type": "json_object"} is any JSON object; {"type": "json_schema", "json_schema":
    {"schema": {...}}} is that schema, always enforced (OpenAI's `strict` is implied);
    {"type": "text"} or none is free text.
    """
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if not isinstance(kind, str):
        raise _bad("'response_format' must be an object like {\"type\": \"text\"}.", "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise _bad("'response_format' json_schema needs {\"json_schema\": {\"name\": ..., "
                       "\"schema\": {...}}} with the schema as an object.", "response_format")
        return json.dumps(schema)
    raise _bad(f"'response_format' of type {kind!r} is not supported; send \"text\", "
               "\"json_object\" or \"json_schema\".", "response_format")


def _logit_bias(body: Mapping[str, Any]) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias} (JSON keys are strings) as (id, bias) pairs."""
    bias = body.get("logit_bias")
    if bias is None:
        return ()
    if not isinstance(bias, Mapping):
        raise _bad("'logit_bias' must be an object of token id -> bias (-100 to 100).", "logit_bias")
    out: list[tuple[int, float]] = []
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise _bad(f"'logit_bias' keys must be token ids (got {json.dumps(key)[:40]}).",
                       "logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(f"'logit_bias' values must be numbers from -100 to 100 (got "
                       f"{json.dumps(value)[:40]} for token {token}).", "logit_bias")
        out.append((token, float(value)))
    return tuple(out)


def parse_model(body: Any) -> str:
    """The body's 'model' (it must be a JSON object naming one)."""
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (see GET /v1/models for the names served here).", "model")
    return model


def parse_sampling(body: Mapping[str, Any], defaults: Sampling, *, logprobs: bool = False,
                   top_logprobs: int = 0, json_schema: str | None = None) -> SamplingParams:
    """The sampling parameters chat and completions share (n, stop, max_tokens, seed,
    temperature, top_p/top_k/min_p, the penalties and their windows, logit_bias), checked;
    each endpoint reads logprobs in its own shape and passes them in."""
    n = _number(body, "n", 1, integer=True)
    if n != 1:
        raise _bad("Only n=1 is supported; send several requests for several answers.", "n")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise _bad("'stop' must be a string or a list of strings.", "stop")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("'seed' must be an integer.", "seed")
    window = defaults.penalty_window
    sampling = SamplingParams(
        temperature=float(_number(body, "temperature", defaults.temperature)),
        top_p=float(_number(body, "top_p", defaults.top_p)),
        top_k=int(_number(body, "top_k", defaults.top_k, integer=True)),
        min_p=float(_number(body, "min_p", defaults.min_p)),
        repetition_penalty=float(_number(body, "repetition_penalty", defaults.repetition_penalty)),
        seed=seed,
        max_tokens=int(_number({"max_tokens": max_tokens}, "max_tokens",
                               defaults.max_tokens or ROOM_LEFT, integer=True)),
        stop=stops,
        presence_penalty=float(_number(body, "presence_penalty", defaults.presence_penalty)),
        frequency_penalty=float(_number(body, "frequency_penalty", defaults.frequency_penalty)),
        repetition_context_size=int(_number(body, "repetition_context_size", window, integer=True)),
        presence_context_size=int(_number(body, "presence_context_size", window, integer=True)),
        frequency_context_size=int(_number(body, "frequency_context_size", window, integer=True)),
        logit_bias=_logit_bias(body),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        json_schema=json_schema,
    )
    try:
        sampling.validate()
    except ValueError as exc:
        raise _bad(f"{exc}.", str(exc).split(" ", 1)[0]) from None
    return sampling


def parse_stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage)."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("'stream' must be true or false.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise _bad("'stream_options' must be an object.", "stream_options")
    return stream, bool(options.get("include_usage"))


def _refuse_unserved(body: Mapping[str, Any]) -> None:
    """Fields a client would miss if they were dropped in silence (no call comes back, no
    audio, no search): refused, saying what to send instead."""
    for name in ("functions", "function_call"):
        if body.get(name) is not None:
            raise _bad(f"'{name}' (the deprecated form of tool calling) is not supported; "
                       "send the functions as 'tools' and the choice as 'tool_choice'.", name)
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list)
                                         and any(m != "text" for m in modalities)):
        raise _bad("This server answers in text only; leave out 'audio' and send 'modalities' "
                   "as [\"text\"] or not at all.", "modalities")
    if body.get("web_search_options") is not None:
        raise _bad("'web_search_options': this server searches nothing; leave it out (or give "
                   "the model a search tool of your own in 'tools').", "web_search_options")


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _thinking_switch(body: Mapping[str, Any]) -> bool | None:
    """`reasoning_effort` as the model's thinking switch (GenerationRequest.thinking):
    "none" turns it off (Qwen3's enable_thinking: no tokens spent reasoning), any level
    on (the level itself is not applied: a switch has two states); absent: the model's
    own default."""
    effort = body.get("reasoning_effort")
    if effort is None:
        return None
    if effort not in REASONING_EFFORTS:
        raise _bad(f"'reasoning_effort' must be one of {', '.join(REASONING_EFFORTS)} (got "
                   f"{json.dumps(effort)[:40]}).", "reasoning_effort")
    return effort != "none"


def parse_chat(body: Any, defaults: Sampling) -> ChatCall:
    """Validate a chat completions body; raise ApiError(400) naming the bad parameter."""
    model = parse_model(body)
    _refuse_unserved(body)
    json_schema = _response_schema(body)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _bad("'logprobs' must be true or false.", "logprobs")
    sampling = parse_sampling(body, defaults, logprobs=bool(logprobs),
                              top_logprobs=int(_number(body, "top_logprobs", 0, integer=True)),
                              json_schema=json_schema)
    stream, include_usage = parse_stream(body)
    request = GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=_messages(body.get("messages")),
        sampling=sampling,
        tools=_tools(body.get("tools"), body.get("tool_choice")),
        **_tool_choice(body.get("tool_choice"), body.get("tools")),
        session_id=body.get("user") if isinstance(body.get("user"), str) else None,
        thinking=_thinking_switch(body),
    )
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    return ChatCall(model, request, stream, include_usage, one_call=parallel is False)


# -- responses out -------------------------------------------------------------------


def usage_body(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def finish_for(reason: str, had_tools: bool) -> str:
    if had_tools and reason == "stop":
        return "tool_calls"
    return reason if reason in ("stop", "length", "tool_calls") else "stop"
