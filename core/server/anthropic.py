"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

Claude Code and other agents built on Anthropic's SDK reach a server through
ANTHROPIC_BASE_URL. A Messages body is translated here into the OpenAI chat body that
core.server.wire validates (system -> a system message, content blocks -> text and image
parts, tool_use -> an assistant's tool_calls, tool_result -> a `tool` message, tools'
input_schema -> parameters, tool_choice any/tool/none -> required/named/none), so it gets
the same checks and the same GenerationRequest as /v1/chat/completions; the events come
back as content blocks: reasoning as `thinking`, text as `text`, calls as `tool_use`,
streamed as Anthropic's SSE sequence (message_start, content_block_start/delta/stop,
message_delta with stop_reason and usage, message_stop).

What is refused, with a sentence: document blocks, images by URL (this server fetches
nothing), `n` answers. Server tools (web search, code execution: this server runs none)
are left out and named in the `x-llmdeck-ignored-tools` header and the log. A `system`
turn inside `messages` (Claude Code sends one) is folded where templates take it.
Thinking blocks sent back in history are dropped (chat templates drop past reasoning);
a thinking block's signature is empty (there is nothing to verify here).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from core.events import (
    Done,
    Error,
    Event,
    PromptRead,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from core.server.collect import collect
from core.server.dialects import generation, guarded, ignored_tools_header
from core.server.limits import prompt_chars
from core.server.sse import EarlyStream, json_response, write_stream
from core.server.wire import ApiError, ChatCall, api_error_for, parse_chat

# HTTP status -> Anthropic's error type.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 408: "timeout_error",
                413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
                504: "timeout_error"}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "cancelled": "end_turn", "error": "end_turn"}


def _stop_fields(finish: str, matched: str | None, call: ChatCall) -> dict[str, Any]:
    """stop_reason and stop_sequence: "stop_sequence" with the string when one of the
    request's stop_sequences ended the reply (not a stop of the engine's own, such as a
    base model's turn marker, which reads as the end of the turn)."""
    if finish == "stop" and matched is not None and matched in call.request.sampling.stop:
        return {"stop_reason": "stop_sequence", "stop_sequence": matched}
    return {"stop_reason": _STOP_REASONS.get(finish, "end_turn"), "stop_sequence": None}


def error_body(error: ApiError) -> dict[str, Any]:
    """{"type": "error", "error": {"type", "message"}}, as Anthropic answers."""
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(error.status, "api_error"),
                                       "message": error.message}}


def render_error(error: ApiError) -> web.Response:
    return json_response(error_body(error), status=error.status)


def _bad(message: str) -> ApiError:
    return ApiError(400, message, code="invalid_value")


# -- request in ----------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{where} must be a string.")
    return value


def _blocks(content: Any, where: str) -> list[Any]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of content blocks.")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _bad(f"{where}[{j}] must be a content block object with a 'type'.")
    return content


def _image_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise _bad(f"{where}.source must be {{type: 'base64', media_type, data}}.")
    if source.get("type") != "base64":
        raise _bad(f"{where}: images by {source.get('type')!r} are not supported; this server "
                   "fetches nothing. Send the image as base64.")
    media = _text(source.get("media_type"), f"{where}.source.media_type")
    data = _text(source.get("data"), f"{where}.source.data")
    return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}


def _tool_result_text(block: Mapping[str, Any], where: str) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    else:
        parts = []
        for j, part in enumerate(_blocks(content, f"{where}.content")):
            if part["type"] != "text":
                raise _bad(f"{where}.content[{j}]: only text is supported inside a tool_result "
                           f"(got {part['type']!r}).")
            parts.append(_text(part.get("text"), f"{where}.content[{j}].text"))
        text = "".join(parts)
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return text


def _message(raw: Any, i: int) -> list[dict[str, Any]]:
    """One Anthropic message as OpenAI chat messages (tool results become `tool` ones).

    Cheap for the common shapes (a string, text blocks): a 32 MiB body can hold a million
    of them, and this runs before the prompt-size check refuses it. Paths for error
    messages are only built when there is an error."""
    role = raw.get("role") if isinstance(raw, Mapping) else None
    if role not in ("user", "assistant", "system"):
        if not isinstance(raw, Mapping):
            raise _bad(f"messages[{i}] must be an object with 'role' and 'content'.")
        raise _bad(f"messages[{i}].role must be 'user', 'assistant' or 'system'.")
    content = raw.get("content")
    if role == "system":  # Claude Code's mid-conversation system turn: see _fold_system
        return [{"role": "system", "content": _system_text(content, f"messages[{i}].content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(f"messages[{i}].content must be a string or a list of content blocks.")
    texts: list[str] = []
    parts: list[dict[str, Any]] | None = None  # once an image comes: every part, in order
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise _bad(f"messages[{i}].content[{j}].text must be a string.")
            texts.append(text)
            if parts is not None:
                parts.append({"type": "text", "text": text})
            continue
        at = f"messages[{i}].content[{j}]"
        if kind == "image":
            if parts is None:
                parts = [{"type": "text", "text": t} for t in texts]
            parts.append(_image_part(block, at))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # past reasoning: chat templates leave it out
        elif kind == "tool_use" and role == "assistant":
            arguments = block.get("input", {})
            if not isinstance(arguments, Mapping):
                raise _bad(f"{at}.input must be an object.")
            calls.append({"id": _text(block.get("id"), f"{at}.id"), "type": "function",
                          "function": {"name": _text(block.get("name"), f"{at}.name"),
                                       "arguments": dict(arguments)}})
        elif kind == "tool_result" and role == "user":
            results.append({"role": "tool", "tool_call_id": _text(block.get("tool_use_id"),
                                                                  f"{at}.tool_use_id"),
                            "content": _tool_result_text(block, at)})
        elif not isinstance(kind, str):
            raise _bad(f"{at} must be a content block object with a 'type'.")
        else:
            raise _bad(f"{at}: content blocks of type {kind[:40]!r} are not supported in a "
                       f"{role} message; send text, image, tool_use (assistant) or tool_result "
                       "(user).")
    out: list[dict[str, Any]] = list(results)
    if texts or parts or calls or not results:
        message: dict[str, Any] = {"role": role,
                                   "content": parts if parts is not None else "".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tools(raw: Any, ignored: list[str]) -> list[dict[str, Any]] | None:
    """Client tools as function tools. Server tools (web search, code execution: Anthropic
    runs those) are left out and named in `ignored`: this server runs none, and the model
    still answers without them (the route says so in a header and the log)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _bad("'tools' must be a list of {name, description, input_schema} objects.")
    out = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise _bad(f"tools[{i}] must be an object {{name, description, input_schema}}.")
        if tool.get("type") not in (None, "custom"):
            ignored.append(str(tool.get("name") or tool.get("type"))[:60])
            continue
        function: dict[str, Any] = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
        if tool.get("description") is not None:
            function["description"] = _text(tool["description"], f"tools[{i}].description")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(raw: Any) -> Any:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, Mapping) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": raw.get("name")}}
    raise _bad("'tool_choice' must be {type: 'auto' | 'any' | 'none'} or {type: 'tool', name}.")


def _system_text(raw: Any, where: str) -> str:
    """A system prompt (a string or text blocks) as one string."""
    if isinstance(raw, list):
        texts = []
        for j, block in enumerate(_blocks(raw, where)):
            if block["type"] != "text":
                raise _bad(f"{where}[{j}] must be a text block.")
            texts.append(_text(block.get("text"), f"{where}[{j}].text"))
        raw = "\n\n".join(texts)
    return _text(raw, where)


def _system(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    text = _system_text(raw, "system")
    return [{"role": "system", "content": text}] if text else []


def _join(content: Any, text: str, *, before: bool = False) -> Any:
    """`text` added to a message's content (a string, or text and image parts)."""
    if isinstance(content, list):
        part = {"type": "text", "text": text}
        return [part, *content] if before else [*content, part]
    return f"{text}\n\n{content}" if before else f"{content}\n\n{text}"


def _fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System turns inside the conversation, placed where every chat template takes them.

    Claude Code sends one (its "mid-conversation system" beta), and many templates refuse
    a system message after the first or have no system role at all. Before the first
    assistant turn it joins the system prompt (the same every turn of a session, so the
    prompt's prefix stays cached); after it, it joins the user turn next to it, so the
    conversation before it keeps its cached prefix."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # later system turns waiting for a user turn
    answered = False
    for message in messages:
        role = message["role"]
        if role == "system":
            text = message["content"]
            if not text:
                continue
            if not answered:
                system.append(text)
            elif out and out[-1]["role"] == "user":
                out[-1] = {**out[-1], "content": _join(out[-1]["content"], text)}
            else:
                pending.append(text)
            continue
        if role == "assistant":
            answered = True
        if role == "user" and pending:
            message = {**message, "content": _join(message["content"], "\n\n".join(pending),
                                                   before=True)}
            pending = []
        out.append(message)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    if not any(m["role"] in ("user", "assistant") for m in out):
        raise _bad("'messages' needs a user turn: system turns alone give the model nothing "
                   "to answer.")
    head = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    return head + out


def chat_body(body: Any, *, counting: bool = False,
              ignored: list[str] | None = None) -> dict[str, Any]:
    """The OpenAI chat body for a Messages body (core.server.wire validates the rest).

    What does not apply here is ignored: `context_management` (nothing is cleared from a
    conversation this server does not keep), `output_config`'s effort, `cache_control`
    (every prompt's prefix is cached), `metadata` beyond user_id. Server tools left out
    are added to `ignored`."""
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of {role, content} objects.")
    if body.get("mcp_servers"):  # the MCP connector: Anthropic's servers call them; none here
        raise _bad("'mcp_servers' is not supported: this server connects to no MCP server for "
                   "you. Run the MCP tools in your client and send them as 'tools'.")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": _fold_system(
        _system(body.get("system")) + [m for i, raw in enumerate(messages) for m in _message(raw, i)])}
    if not counting:
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise _bad("'max_tokens' is required: a positive integer, the most tokens to generate.")
        chat["max_tokens"] = max_tokens
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                chat[name] = body[name]
        stops = body.get("stop_sequences")
        if stops is not None:
            if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                raise _bad("'stop_sequences' must be a list of strings.")
            chat["stop"] = stops
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise _bad("'stream' must be true or false.")
        chat["stream"] = stream
        chat["tool_choice"] = _tool_choice(body.get("tool_choice"))
        choice = body.get("tool_choice")
        if isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False  # at most one tool_use (core.server.one_call)
    tools = _tools(body.get("tools"), ignored if ignored is not None else [])
    if tools is not None:
        chat["tools"] = tools
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    return {k: v for k, v in chat.items() if v is not None}


def _thinking_wanted(body: Mapping[str, Any]) -> bool:
    """Reasoning is shown as thinking blocks unless the client turned thinking off."""
    return _thinking_switch(body) is not False


def _thinking_switch(body: Mapping[str, Any]) -> bool | None:
    """`thinking` as the model's thinking switch (GenerationRequest.thinking): "enabled"
    on, "disabled" off, absent: the model's own default. Off is more than hiding the
    blocks: a model with a switch (Qwen3's enable_thinking) then spends no tokens on it.
    budget_tokens is not applied (nothing here caps reasoning apart from max_tokens)."""
    thinking = body.get("thinking")
    if thinking is None:
        return None
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("'thinking' must be {type: 'enabled', budget_tokens} or {type: 'disabled'}.")
    return None if kind == "adaptive" else kind == "enabled"


# -- replies out -----------------------------------------------------------------------


def _usage(usage: Usage | None) -> dict[str, int]:
    """Anthropic's usage: input_tokens are the prompt tokens not read from the cache (the
    two are reported apart, and a client adds them up)."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    return {"input_tokens": usage.prompt_tokens - cached, "output_tokens": usage.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def _ping() -> bytes:
    return b'event: ping\ndata: {"type": "ping"}\n\n'


def _message_start(call: ChatCall, template: str | None, read: PromptRead | None) -> bytes:
    """The stream's first event, with the prompt's real token count apart from what the
    cache holds (`read`: the worker sends it once it has tokenized the prompt, before the
    prefill). Where the engine does not tell, or the stream opens first (the request
    waited for a load or a busy worker), an estimate from the prompt's characters (about
    four a token), without tools when the model's chat template takes none; message_delta
    carries the real counts either way."""
    if read is not None:
        cached = min(read.cached_tokens, read.prompt_tokens)
        usage = {"input_tokens": read.prompt_tokens - cached, "output_tokens": 0,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
    else:
        request = call.request
        if template is not None and "tools" not in template:
            request = replace(request, tools=())
        usage = {"input_tokens": max(1, prompt_chars(request) // 4), "output_tokens": 0,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    data = {"type": "message_start", "message": {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
        "model": call.model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage}}
    return (b"event: message_start\ndata: " + json.dumps(data, ensure_ascii=False).encode()
            + b"\n\n" + _ping())


COUNTS_AHEAD = ("llamacpp", "mlx", "scripted")  # engines that send PromptRead before the prefill


def _template_of(info: dict[str, Any] | None) -> str | None:
    """The chat template ("" for a base model: a transcript, no tools), None if unknown."""
    if info is None:
        return None
    if info.get("base_model"):
        return ""
    return str(info.get("chat_template") or "")


def _tool_input(call: ToolCall) -> dict[str, Any]:
    return dict(call.arguments) if isinstance(call.arguments, Mapping) else {}


class MessagesRoute:
    """/v1/messages and /v1/messages/count_tokens over a ChatServer."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def _call(self, request: web.Request, *, counting: bool = False,
                    ignored: list[str] | None = None) -> tuple[Mapping[str, Any], ChatCall]:
        body = await self.server._body(request)
        chat = chat_body(body, counting=counting, ignored=ignored)
        if counting:
            chat["max_tokens"] = 1
        call = parse_chat(chat, self.server.runtime.settings.sampling)
        thinking = _thinking_switch(body)
        if thinking is not None:
            call = replace(call, request=replace(call.request, thinking=thinking))
        return body, call

    async def messages(self, request: web.Request) -> web.StreamResponse:
        ignored: list[str] = []
        body, call = await self._call(request, ignored=ignored)
        thinking = _thinking_wanted(body)
        headers = ignored_tools_header(ignored, request.path)
        early = None
        if call.stream:  # opened while a long prompt is prefilled (core.server.sse.EarlyStream)
            info = await self._info(call.model)
            template = _template_of(info)
            call = replace(call, request=replace(call.request, report_prompt=True))
            # held for the worker's count where the engine sends one (core.events.PromptRead)
            early = EarlyStream(request, self.server.limits.write_timeout_s,
                                lambda: _message_start(call, template, early.prompt_read),
                                _ping(), headers,
                                hold_opening=(info or {}).get("engine") in COUNTS_AHEAD)
        async with generation(self.server, call, "/v1/messages", early=early) as (first, batches):
            if early is not None:
                return await self._stream(request, call, thinking, first, batches, early)
            response = await self._complete(call, thinking, first, batches)
            response.headers.update(headers)
            return response

    async def _info(self, model: str) -> dict[str, Any] | None:
        """The app model's load info, None when it is another model or not loaded."""
        server = self.server
        if server.runtime.model.state != "ready":
            return None
        if model != server.local_name():
            entry = await server.local_models.find(model)
            if entry is None or not server.local_models.is_app_model(entry):
                return None
        return dict(server.runtime.model.info or {})

    async def count_tokens(self, request: web.Request) -> web.Response:
        """The prompt's real token count: a one-token generation, whose prefill the next
        turn reuses from the prefix cache (there is no tokenizer outside the worker)."""
        _, call = await self._call(request, counting=True)
        async with generation(self.server, call, "/v1/messages/count_tokens") as (first, batches):
            got = await collect(first, batches)
        if got.error is not None:
            raise api_error_for(got.error)
        return json_response({"input_tokens": got.usage.prompt_tokens if got.usage else 0})

    async def _complete(self, call: ChatCall, thinking: bool, first: list[Event],
                        batches: AsyncIterator[list[Event]]) -> web.Response:
        got = await collect(first, batches)
        if got.error is not None:
            raise api_error_for(got.error)
        content: list[dict[str, Any]] = []
        if thinking and got.reasoning:
            content.append({"type": "thinking", "thinking": "".join(got.reasoning), "signature": ""})
        if got.text:
            content.append({"type": "text", "text": "".join(got.text)})
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c)}
                    for c in got.calls]
        finish = "tool_calls" if got.calls and got.finish == "stop" else got.finish
        return json_response({
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": call.model, "content": content,
            **_stop_fields(finish, got.stop_sequence, call), "usage": _usage(got.usage)})

    async def _stream(self, request: web.Request, call: ChatCall, thinking: bool,
                      first: list[Event], batches: AsyncIterator[list[Event]],
                      early: EarlyStream) -> web.StreamResponse:
        """Anthropic's SSE: one content block per run of text, of reasoning, or per call."""
        out = bytearray()

        def emit(kind: str, data: dict[str, Any]) -> None:
            out.extend(b"event: " + kind.encode() + b"\ndata: "
                       + json.dumps({"type": kind, **data}, ensure_ascii=False).encode() + b"\n\n")

        state: dict[str, Any] = {"index": -1, "open": None, "usage": None, "calls": 0}

        def close() -> None:
            if state["open"] == "thinking":
                emit("content_block_delta", {"index": state["index"],
                                             "delta": {"type": "signature_delta", "signature": ""}})
            if state["open"] is not None:
                emit("content_block_stop", {"index": state["index"]})
                state["open"] = None

        def open_block(kind: str, block: dict[str, Any]) -> None:
            close()
            state["index"] += 1
            state["open"] = kind
            emit("content_block_start", {"index": state["index"], "content_block": block})

        def delta(delta: dict[str, Any]) -> None:
            emit("content_block_delta", {"index": state["index"], "delta": delta})

        streamed: set[str] = set()  # tool calls opened by a ToolCallDelta

        def encode(batch: list[Event]) -> bool:
            for event in batch:
                if isinstance(event, TextDelta):
                    if not event.text:
                        continue
                    if state["open"] != "text":
                        open_block("text", {"type": "text", "text": ""})
                    delta({"type": "text_delta", "text": event.text})
                elif isinstance(event, ReasoningDelta):
                    if not thinking or not event.text:
                        continue
                    if state["open"] != "thinking":
                        open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                    delta({"type": "thinking_delta", "thinking": event.text})
                elif isinstance(event, ToolCallDelta):
                    if event.name is not None:
                        open_block(f"tool:{event.id}", {"type": "tool_use", "id": event.id,
                                                        "name": event.name, "input": {}})
                        streamed.add(event.id)
                        state["calls"] += 1
                    elif state["open"] == f"tool:{event.id}" and event.arguments:
                        delta({"type": "input_json_delta", "partial_json": event.arguments})
                elif isinstance(event, ToolCall):
                    if event.id not in streamed:  # not streamed: the whole call at once
                        open_block(f"tool:{event.id}", {"type": "tool_use", "id": event.id,
                                                        "name": event.name, "input": {}})
                        delta({"type": "input_json_delta",
                               "partial_json": json.dumps(_tool_input(event), ensure_ascii=False)})
                        state["calls"] += 1
                    if state["open"] == f"tool:{event.id}":
                        close()
                elif isinstance(event, Usage):
                    state["usage"] = event
                elif isinstance(event, Error):  # headers are sent: the error travels in the stream
                    close()
                    emit("error", {"error": error_body(api_error_for(event))["error"]})
                    return True
                elif isinstance(event, Done):
                    close()
                    finish = event.finish_reason
                    if state["calls"] and finish == "stop":
                        finish = "tool_calls"
                    emit("message_delta", {"delta": _stop_fields(finish, event.stop_sequence, call),
                                           "usage": _usage(state["usage"])})
                    emit("message_stop", {})
                    return True
            return False

        return await write_stream(request, self.server.limits.write_timeout_s, out, encode,
                                  first, batches, early)


def add_routes(app: web.Application, server: Any) -> None:
    route = MessagesRoute(server)
    app.router.add_post("/v1/messages", guarded(render_error)(route.messages))
    app.router.add_post("/v1/messages/count_tokens", guarded(render_error)(route.count_tokens))

