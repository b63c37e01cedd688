"""OpenAI's Responses API: POST /v1/responses.

Codex and newer OpenAI clients speak Responses rather than chat completions. A body
(input as text or items, instructions, function tools, function_call /
function_call_output items, text.format) is translated here into the OpenAI chat body
core.server.wire validates, so it meets the same checks, the same GenerationRequest and
the same admission (core.server.dialects) as chat. The reply is built as output items
(reasoning, message, function_call) by one builder, which also emits the streaming
events (response.created, output_item.added, output_text.delta,
function_call_arguments.delta, ..., response.completed) when the client streams.

`previous_response_id`: each stored response (store is true unless the client says
false) keeps its whole conversation as chat messages, in memory only, for the server's
life, in an LRU bounded by count and by size; a later request continues it. The
instructions are not carried over, as OpenAI documents. Namespace tools (Codex's) are
flattened into function tools and their calls named back (Namespaces). Hosted tools (web
search, file search, computer use: this server runs none) are left out and named in the
`x-llmdeck-ignored-tools` header and the log. Refused with a sentence: file inputs, item
references, background mode.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiohttp import web

from core.events import (
    Done,
    Error,
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from core.openai_wire import tool_call_body
from core.server.dialects import generation, guarded, ignored_tools_header
from core.server.limits import MAX_INT, check_numbers
from core.server.sse import KEEPALIVE_COMMENT, EarlyStream, json_response, write_stream
from core.server.wire import ApiError, api_error_for, parse_chat

MAX_STORED_RESPONSES = 256
MAX_STORED_CHARS = 64 * 1024 * 1024  # all stored conversations together


def render_error(error: ApiError) -> web.Response:
    """OpenAI's shape, as the chat route answers."""
    return json_response(error.body(), status=error.status)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


class ConversationStore:
    """Finished responses' conversations (chat messages), least recently used out first
    once there are more than `max_items` or their text passes `max_chars`."""

    def __init__(self, max_items: int = MAX_STORED_RESPONSES,
                 max_chars: int = MAX_STORED_CHARS) -> None:
        self.max_items = max_items
        self.max_chars = max_chars
        self._items: OrderedDict[str, tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._chars = 0

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        entry = self._items.get(response_id)
        if entry is None:
            return None
        self._items.move_to_end(response_id)
        return entry[0]

    def put(self, response_id: str, messages: list[dict[str, Any]]) -> None:
        size = len(json.dumps(messages, ensure_ascii=False))
        if size > self.max_chars:
            return  # one conversation larger than the whole store: not kept
        self._items[response_id] = (messages, size)
        self._chars += size
        while len(self._items) > self.max_items or self._chars > self.max_chars:
            _, (_, dropped) = self._items.popitem(last=False)
            self._chars -= dropped

    def __len__(self) -> int:
        return len(self._items)


# -- request in ------------------------------------------------------------------------


def _parts(content: Any, where: str) -> Any:
    """An input message's content as chat content (a string, or text and image parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of content parts.", where)
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        at = f"{where}[{j}]"
        if kind in ("input_text", "output_text", "text", "refusal"):
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise _bad(f"{at}.text must be a string.", at)
            out.append({"type": "text", "text": text})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise _bad(f"{at}: send the image as image_url (a data: URL); file ids are not "
                           "supported here.", at)
            out.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise _bad(f"{at}: content parts of type {str(kind)[:40]!r} are not supported; send "
                       "input_text and input_image.", at)
    return out


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    parts = _parts(output, where)
    if isinstance(parts, list) and any(p["type"] != "text" for p in parts):
        raise _bad(f"{where}: only text is supported in a function_call_output.", where)
    return parts if isinstance(parts, str) else "".join(p["text"] for p in parts)


def _items(raw: Any, names: Namespaces | None = None) -> list[dict[str, Any]]:
    """The input as chat messages (a namespaced call by its flat name: see Namespaces)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise _bad("'input' must be a string or a list of input items.", "input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise _bad(f"{where} must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _bad(f"{where}.role must be user, assistant, system or developer.",
                           f"{where}.role")
            out.append({"role": role, "content": _parts(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            arguments = item.get("arguments", "")
            if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
                raise _bad(f"{where} must be {{type: 'function_call', call_id, name, arguments "
                           "(a JSON string)}.", where)
            if names is not None:
                name = names.flat(item.get("namespace"), name)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if out and out[-1]["role"] == "assistant":  # calls join the reply they end
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _bad(f"{where}.call_id must be the call's id.", f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": _output_text(item.get("output", ""), f"{where}.output")})
        elif kind == "reasoning":
            continue  # past reasoning: chat templates leave it out
        else:
            raise _bad(f"{where}: input items of type {str(kind)[:40]!r} are not supported; send "
                       "message, function_call and function_call_output items.", where)
    return out


class Namespaces:
    """Namespace tools flattened into function tools, and their calls named back.

    Codex groups tools in `{type: "namespace", name, tools: [...]}`; a chat template
    knows only functions. Each inner function is offered under its own name (or
    `namespace__name` when two namespaces, or a plain tool, share that name), and a call
    of it comes back as Responses does: the inner name with `namespace` set."""

    def __init__(self) -> None:
        self.by_flat: dict[str, tuple[str, str]] = {}  # flat name -> (namespace, inner name)
        self.by_pair: dict[tuple[str, str], str] = {}

    def flat(self, namespace: Any, name: str) -> str:
        if not isinstance(namespace, str) or not namespace:
            return name
        return self.by_pair.get((namespace, name), f"{namespace}__{name}")

    def item_fields(self, flat: str) -> dict[str, str]:
        """`name` (and `namespace`) of a function_call item for a call of `flat`."""
        pair = self.by_flat.get(flat)
        return {"name": flat} if pair is None else {"name": pair[1], "namespace": pair[0]}

    def tools(self, raw: Any, ignored: list[str]) -> list[dict[str, Any]] | None:
        """The request's tools as chat function tools; hosted ones (web search, file
        search, code interpreter: this server runs none) are named in `ignored`."""
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise _bad("'tools' must be a list of {type: 'function', name, parameters} objects.",
                       "tools")
        plain: list[tuple[Mapping[str, Any], str | None, str | None]] = []
        for i, tool in enumerate(raw):
            kind = tool.get("type") if isinstance(tool, Mapping) else None
            if kind == "function":
                plain.append((tool, None, None))
            elif kind == "namespace":
                inner = tool.get("tools")
                namespace = tool.get("name")
                if not isinstance(namespace, str) or not namespace or not isinstance(inner, list):
                    raise _bad(f"tools[{i}] must be {{type: 'namespace', name, tools: [...]}}.",
                               f"tools[{i}]")
                about = tool.get("description")
                for sub in inner:
                    if isinstance(sub, Mapping) and sub.get("type", "function") == "function":
                        plain.append((sub, namespace, about if isinstance(about, str) else None))
                    else:
                        sub_kind = sub.get("type") if isinstance(sub, Mapping) else None
                        ignored.append(f"{namespace}.{str(sub_kind)[:40]}")
            elif isinstance(tool, Mapping) and isinstance(kind, str):
                ignored.append(str(tool.get("name") or kind)[:60])
            else:
                raise _bad(f"tools[{i}] must be a tool object with a 'type'.", f"tools[{i}]")
        seen: dict[str, int] = {}
        for tool, _, _ in plain:
            name = str(tool.get("name"))
            seen[name] = seen.get(name, 0) + 1
        out = []
        for tool, namespace, about in plain:
            function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            if namespace is not None:
                name = str(tool.get("name"))
                flat = name if seen[name] == 1 else f"{namespace}__{name}"
                self.by_flat[flat] = (namespace, name)
                self.by_pair[(namespace, name)] = flat
                function["name"] = flat
                if about and isinstance(function.get("description"), str):
                    function["description"] = f"({namespace}: {about}) {function['description']}"
            out.append({"type": "function", "function": function})
        return out


def _tool_choice(raw: Any, names: Namespaces) -> Any:
    if isinstance(raw, Mapping) and raw.get("type") == "function":
        name = raw.get("name")
        if isinstance(name, str):
            name = names.flat(raw.get("namespace"), name)
        return {"type": "function", "function": {"name": name}}
    return raw


def _text_format(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    fmt = raw.get("format") if isinstance(raw, Mapping) else None
    if fmt is None:
        return None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"),
                                                       "schema": fmt.get("schema")}}
    return fmt


def _session(body: Mapping[str, Any]) -> Any:
    """The conversation's key for the pool's worker affinity (core.workers.model_group):
    Codex's `prompt_cache_key` (its session id), else `user`. With two or more replicas,
    each turn then goes to the worker whose prefix cache holds the conversation so far,
    instead of the least recently used one, which holds none of it."""
    key = body.get("prompt_cache_key")
    return key if isinstance(key, str) and key else body.get("user")


def chat_body(body: Any, history: list[dict[str, Any]], names: Namespaces | None = None,
              ignored: list[str] | None = None) -> dict[str, Any]:
    """The OpenAI chat body for a Responses body continuing `history`; namespace tools are
    flattened into `names`, hosted tools left out are added to `ignored`."""
    names = names if names is not None else Namespaces()
    ignored = ignored if ignored is not None else []
    if body.get("background"):
        raise _bad("Background responses are not supported; send the request and wait, or "
                   "stream it.", "background")
    if body.get("conversation") is not None:  # dropped, the model would lose the history
        raise _bad("'conversation' (OpenAI's stored conversations) is not supported; continue "
                   "with 'previous_response_id', or send the whole conversation as 'input'.",
                   "conversation")
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or not 1 <= limit <= MAX_INT):
        raise _bad(f"'max_output_tokens' must be an integer from 1 to {MAX_INT}.",
                   "max_output_tokens")
    instructions = body.get("instructions")
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("'instructions' must be a string.", "instructions")
        messages.append({"role": "system", "content": instructions})
    tools = names.tools(body.get("tools"), ignored)
    messages += history + _items(body.get("input"), names)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                            "tools": tools,
                            "tool_choice": _tool_choice(body.get("tool_choice"), names),
                            "response_format": _text_format(body.get("text")),
                            "max_tokens": body.get("max_output_tokens"),
                            "stream": body.get("stream", False), "user": _session(body)}
    for name in ("temperature", "top_p", "seed", "parallel_tool_calls"):
        chat[name] = body.get(name)
    reasoning = body.get("reasoning")
    if reasoning is not None:  # its effort is chat's reasoning_effort: "none" turns thinking off
        if not isinstance(reasoning, Mapping):
            raise _bad("'reasoning' must be an object like {\"effort\": \"low\"}.", "reasoning")
        chat["reasoning_effort"] = reasoning.get("effort")
    return {k: v for k, v in chat.items() if v is not None}


# -- reply out -------------------------------------------------------------------------


class OutputBuilder:
    """The response's output items, built from events; `emit` (when streaming) gets each
    event of the Responses stream as it happens."""

    def __init__(self, response: dict[str, Any],
                 emit: Callable[[str, dict[str, Any]], None] | None = None,
                 names: Namespaces | None = None) -> None:
        self.response = response
        self.names = names or Namespaces()
        self.items: list[dict[str, Any]] = []
        self.emit = emit or (lambda kind, data: None)
        self.open: dict[str, Any] | None = None  # the item being written
        self.text: list[str] = []  # its text, reasoning or arguments so far
        self.calls: dict[str, dict[str, Any]] = {}  # streamed calls by id
        self.usage: Usage | None = None

    def _add(self, item: dict[str, Any]) -> None:
        self.close()
        self.items.append(item)
        self.open = item
        self.text = []
        self.emit("response.output_item.added", {"output_index": len(self.items) - 1, "item": item})

    def close(self) -> None:
        item = self.open
        if item is None:
            return
        self.open = None
        index = len(self.items) - 1
        ids = {"item_id": item["id"], "output_index": index}
        text = "".join(self.text)
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            item["content"] = [part]
            self.emit("response.output_text.done", {**ids, "content_index": 0, "text": text,
                                                    "logprobs": []})
            self.emit("response.content_part.done", {**ids, "content_index": 0, "part": part})
        elif item["type"] == "reasoning":
            item["content"] = [{"type": "reasoning_text", "text": text}]
            self.emit("response.reasoning_text.done", {**ids, "content_index": 0, "text": text})
        elif item["type"] == "function_call":
            item["arguments"] = text
            self.emit("response.function_call_arguments.done", {**ids, "name": item["name"],
                                                                "arguments": text})
        item["status"] = "completed"
        self.emit("response.output_item.done", {"output_index": index, "item": item})

    def _ids(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.items) - 1}

    def feed(self, event: Event) -> None:
        if isinstance(event, TextDelta) and event.text:
            if self.open is None or self.open["type"] != "message":
                self._add({"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
                           "status": "in_progress", "content": []})
                self.emit("response.content_part.added", {**self._ids(), "content_index": 0, "part": {
                    "type": "output_text", "text": "", "annotations": [], "logprobs": []}})
            self.text.append(event.text)
            self.emit("response.output_text.delta", {**self._ids(), "content_index": 0,
                                                     "delta": event.text, "logprobs": []})
        elif isinstance(event, ReasoningDelta) and event.text:
            if self.open is None or self.open["type"] != "reasoning":
                self._add({"id": f"rs_{uuid.uuid4().hex}", "type": "reasoning", "summary": [],
                           "content": [], "status": "in_progress"})
            self.text.append(event.text)
            self.emit("response.reasoning_text.delta", {**self._ids(), "content_index": 0,
                                                        "delta": event.text})
        elif isinstance(event, ToolCallDelta):
            if event.name is not None:
                self._call_item(event.id, event.name)
            elif self.open is not None and self.open.get("call_id") == event.id and event.arguments:
                self.text.append(event.arguments)
                self.emit("response.function_call_arguments.delta", {**self._ids(),
                                                                     "delta": event.arguments})
        elif isinstance(event, ToolCall):
            if event.id not in self.calls:  # not streamed: the whole call at once
                self._call_item(event.id, event.name)
                arguments = tool_call_body(event.id, event.name, event.arguments, event.raw)
                self.text.append(arguments["function"]["arguments"])
                self.emit("response.function_call_arguments.delta", {
                    **self._ids(), "delta": arguments["function"]["arguments"]})
            if self.open is not None and self.open.get("call_id") == event.id:
                self.close()
        elif isinstance(event, Usage):
            self.usage = event

    def _call_item(self, call_id: str, name: str) -> None:
        item = {"id": f"fc_{uuid.uuid4().hex}", "type": "function_call", "call_id": call_id,
                **self.names.item_fields(name), "arguments": "", "status": "in_progress"}
        self.calls[call_id] = item
        self._add(item)

    def finish(self, finish_reason: str) -> dict[str, Any]:
        """The whole response, completed (or incomplete when the token limit cut it)."""
        self.close()
        usage = self.usage
        incomplete = finish_reason == "length"
        self.response.update({
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": self.items,
            "usage": None if usage is None else {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt_tokens + usage.completion_tokens}})
        return self.response

    def assistant_messages(self) -> list[dict[str, Any]]:
        """The output as chat messages, for the next turn's history."""
        text = "".join(p["text"] for i in self.items if i["type"] == "message" for p in i["content"])
        calls = [{"id": i["call_id"], "type": "function",
                  "function": {"name": self.names.flat(i.get("namespace"), i["name"]),
                               "arguments": i["arguments"]}}
                 for i in self.items if i["type"] == "function_call"]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return [message]


def _opening(response: dict[str, Any]) -> bytes:
    """A stream's first two events, sent before the first token when the prompt is long."""
    out = bytearray()
    for sequence, kind in enumerate(("response.created", "response.in_progress")):
        out.extend(b"event: " + kind.encode() + b"\ndata: " + json.dumps(
            {"type": kind, "sequence_number": sequence, "response": dict(response)},
            ensure_ascii=False).encode() + b"\n\n")
    return bytes(out)


class ResponsesRoute:
    """POST /v1/responses over a ChatServer, with the server's stored conversations."""

    def __init__(self, server: Any, store: ConversationStore | None = None) -> None:
        self.server = server
        self.store = store or ConversationStore()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._body(request)
        if not isinstance(body, Mapping):
            raise _bad("The request body must be a JSON object.")
        previous = body.get("previous_response_id")
        history: list[dict[str, Any]] = []
        if previous is not None:
            found = self.store.get(previous) if isinstance(previous, str) else None
            if found is None:
                raise ApiError(400, f"Previous response with id {str(previous)[:80]!r} not found: "
                               "this server keeps the last "
                               f"{self.store.max_items} stored responses while it runs. Send the "
                               "whole conversation as input instead.",
                               param="previous_response_id", code="previous_response_not_found")
            history = found
        store = body.get("store", True)
        if not isinstance(store, bool):
            raise _bad("'store' must be true or false.", "store")
        names, ignored = Namespaces(), []
        chat = chat_body(body, history, names, ignored)
        headers = ignored_tools_header(ignored, "/v1/responses")
        check_numbers(chat)
        call = parse_chat(chat, self.server.runtime.settings.sampling)
        response = {"id": f"resp_{uuid.uuid4().hex}", "object": "response",
                    "created_at": int(time.time()), "status": "in_progress", "model": call.model,
                    "output": [], "error": None, "incomplete_details": None,
                    "instructions": body.get("instructions"),
                    "previous_response_id": previous, "parallel_tool_calls": not call.one_call,
                    "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
                    "temperature": body.get("temperature"), "top_p": body.get("top_p"),
                    "max_output_tokens": body.get("max_output_tokens"), "store": store,
                    "metadata": body.get("metadata") or {}, "usage": None}
        conversation = chat["messages"][1:] if body.get("instructions") is not None else chat["messages"]
        early = None
        if call.stream:  # opened while a long prompt is prefilled (core.server.sse.EarlyStream)
            early = EarlyStream(request, self.server.limits.write_timeout_s,
                                _opening(response), KEEPALIVE_COMMENT, headers)
        async with generation(self.server, call, "/v1/responses", early=early) as (first, batches):
            if early is not None:
                return await self._stream(request, response, first, batches, conversation, store,
                                          names, early)
            builder = OutputBuilder(response, names=names)
            finish = await self._run(builder, first, batches)
            result = builder.finish(finish)
        if store:
            self.store.put(result["id"], conversation + builder.assistant_messages())
        reply = json_response(result)
        reply.headers.update(headers)
        return reply

    async def _run(self, builder: OutputBuilder, first: list[Event],
                   batches: AsyncIterator[list[Event]]) -> str:
        batch: list[Event] | None = first
        while batch is not None:
            for event in batch:
                if isinstance(event, Error):
                    raise api_error_for(event)
                if isinstance(event, Done):
                    return event.finish_reason
                builder.feed(event)
            batch = await anext(batches, None)
        return "stop"

    async def _stream(self, request: web.Request, response: dict[str, Any], first: list[Event],
                      batches: AsyncIterator[list[Event]], conversation: list[dict[str, Any]],
                      store: bool, names: Namespaces, early: EarlyStream) -> web.StreamResponse:
        out = bytearray()
        sequence = 2  # response.created and response.in_progress: the opening (_opening)

        def emit(kind: str, data: dict[str, Any]) -> None:
            nonlocal sequence
            out.extend(b"event: " + kind.encode() + b"\ndata: " + json.dumps(
                {"type": kind, "sequence_number": sequence, **data}, ensure_ascii=False).encode()
                + b"\n\n")
            sequence += 1

        builder = OutputBuilder(response, emit, names)

        def encode(batch: list[Event]) -> bool:
            for event in batch:
                if isinstance(event, Error):  # headers are sent: the failure is an event
                    builder.close()
                    error = api_error_for(event)
                    response.update({"status": "failed", "output": builder.items,
                                     "error": {"code": error.code or "server_error",
                                               "message": error.message}})
                    emit("response.failed", {"response": response})
                    return True
                if isinstance(event, Done):
                    result = builder.finish(event.finish_reason)
                    if store:
                        self.store.put(result["id"], conversation + builder.assistant_messages())
                    kind = "response.incomplete" if result["status"] == "incomplete" else "response.completed"
                    emit(kind, {"response": result})
                    return True
                builder.feed(event)
            return False

        return await write_stream(request, self.server.limits.write_timeout_s, out, encode,
                                  first, batches, early)


def add_routes(app: web.Application, server: Any) -> None:
    app.router.add_post("/v1/responses", guarded(render_error)(ResponsesRoute(server).handle))

