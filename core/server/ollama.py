"""Ollama's API: /api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version.

Many front ends (Open WebUI, editor plug-ins, scripts using the `ollama` package) speak
only Ollama's API; with OLLAMA_HOST pointed at `llmdeck serve` they work unchanged. A
chat or generate body becomes the OpenAI chat body core.server.wire validates (the
`options` onto the sampling parameters), is admitted like chat (core.server.dialects),
and answers as Ollama does: NDJSON lines when streaming (the default), one object when
not, errors as {"error": "..."}.

Mapped onto the pool as it is today:
- options: temperature, top_p, top_k, min_p, seed, num_predict, stop, repeat_penalty,
  repeat_last_n, presence_penalty, frequency_penalty are applied; the load-time ones
  (num_ctx, num_gpu, num_thread, num_batch, use_mmap, ...) and samplers the engines lack
  (mirostat, typical_p, tfs_z) are accepted and ignored: the model is loaded once, by
  the server, with its own settings.
- every local model answers by its id (`gemma3:270m-q4_k_m`), an alias, or its family
  alone (`gemma3`, `gemma3:latest`) when one of that family is here; a request loads it
  (core.server.local_models). /api/tags lists them all, /api/ps the loaded ones.
- keep_alive, as Ollama means it: how long the model stays loaded once idle from this
  request on (seconds, "5m"; 0 unloads it after the reply; -1 keeps it). A request with
  no prompt loads the model (done_reason "load"), or with keep_alive 0 unloads it
  (done_reason "unload"), replies running on it allowed to finish first.
- `think`: false hides the reasoning; otherwise it comes as `thinking`.
- /api/generate's raw prompt is sent as is (as /v1/completions does); `context`
  (token arrays), `suffix` and a per-request `template` are refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from core.engines.base import GenerationRequest
from core.events import Done, Error, Event, ReasoningDelta, TextDelta, ToolCall, Usage
from core.server.collect import collect
from core.server.completions import admit_raw_prompt
from core.server.dialects import generation, guarded
from core.server.limits import MAX_INT, check_numbers
from core.server.local_models import describe, keep_alive_of
from core.server.request_log import STARTED_KEY
from core.server.sse import EarlyStream, json_response
from core.server.wire import ApiError, ChatCall, api_error_for, parse_chat

# The Ollama API version whose shapes this module follows (clients probe it).
OLLAMA_API_VERSION = "0.9.0"
NDJSON_HEADERS = {"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache",
                  "X-Accel-Buffering": "no"}
# Ollama option -> OpenAI chat body parameter (core.server.wire checks the values).
_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
            "seed": "seed", "stop": "stop", "repeat_penalty": "repetition_penalty",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}
# Load-time options and samplers the engines lack: accepted, ignored.
IGNORED_OPTIONS = frozenset({
    "num_ctx", "num_gpu", "main_gpu", "num_thread", "num_batch", "num_keep", "use_mmap",
    "use_mlock", "numa", "low_vram", "f16_kv", "vocab_only", "logits_all", "embedding_only",
    "typical_p", "tfs_z", "mirostat", "mirostat_tau", "mirostat_eta", "penalize_newline"})
_IMAGE_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                (b"RIFF", "image/webp"), (b"GIF8", "image/gif"))


def render_error(error: ApiError) -> web.Response:
    """{"error": "..."}, as Ollama answers (an unknown model points at /api/tags, the
    listing an Ollama client reads)."""
    message = error.message
    if error.code == "model_not_found":
        message = message.replace("GET /v1/models", "GET /api/tags")
    return json_response({"error": message}, status=error.status)


def _bad(message: str) -> ApiError:
    return ApiError(400, message, code="invalid_value")


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# -- requests in ---------------------------------------------------------------------


def _model(body: Any, server: Any) -> str:
    """The model named, with Ollama's default tag ':latest' taken as the served name."""
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.")
    model = body.get("model", body.get("name"))
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (GET /api/tags lists the models served here).")
    if model.endswith(":latest") and model.removesuffix(":latest") == server.local_name():
        return model.removesuffix(":latest")
    return model


def _options(body: Mapping[str, Any], chat: dict[str, Any]) -> None:
    options = body.get("options")
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise _bad("'options' must be an object, like {\"temperature\": 0.7}.")
    for name, value in options.items():
        if name in _OPTIONS:
            chat[_OPTIONS[name]] = value
        elif name == "num_predict":
            if isinstance(value, bool) or not isinstance(value, int) or value > MAX_INT:
                raise _bad(f"options.num_predict must be an integer of at most {MAX_INT}.")
            if value > 0:  # -1 (no limit) and -2 (fill the context): the server's default
                chat["max_tokens"] = value
        elif name == "repeat_last_n":
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad("options.repeat_last_n must be an integer.")
            if value > 0:
                chat["repetition_context_size"] = value
        elif name not in IGNORED_OPTIONS:
            raise _bad(f"options.{str(name)[:40]} is not an option this server knows; see "
                       "the README for those applied and those ignored.")


def _keep_alive(body: Mapping[str, Any]) -> float | None | str:
    """The request's keep_alive in the pool's terms (local_models.keep_alive_of); a 400 in
    Ollama's shape when it is unreadable."""
    try:
        return keep_alive_of(body)
    except ApiError as exc:
        raise _bad(exc.message) from None


def _format(body: Mapping[str, Any], chat: dict[str, Any]) -> None:
    fmt = body.get("format")
    if fmt in (None, ""):
        return
    if fmt == "json":
        chat["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, Mapping):
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "format",
                                                                          "schema": fmt}}
    else:
        raise _bad("'format' must be \"json\" or a JSON schema object.")


def _image_parts(images: Any, where: str) -> list[dict[str, Any]]:
    """Ollama's bare base64 images as data-URL parts (the type read from the bytes)."""
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise _bad(f"{where}.images must be a list of base64 strings.")
    parts = []
    for j, data in enumerate(images):
        try:
            head = base64.b64decode(data[:24] + "=" * (-len(data[:24]) % 4), validate=False)
        except (binascii.Error, ValueError):
            raise _bad(f"{where}.images[{j}] is not base64.") from None
        media = next((m for magic, m in _IMAGE_MAGIC if head.startswith(magic)), "image/png")
        parts.append({"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}})
    return parts


def _content(text: Any, images: Any, where: str) -> Any:
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise _bad(f"{where}.content must be a string.")
    parts = _image_parts(images, where)
    return [{"type": "text", "text": text}, *parts] if parts else text


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise _bad("'messages' must be a list of {role, content} objects.")
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) awaiting their results
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise _bad(f"{where} must be an object with 'role' and 'content'.")
        role = m.get("role")
        message: dict[str, Any] = {"role": role, "content": _content(m.get("content"),
                                                                     m.get("images"), where)}
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise _bad(f"{where}.tool_calls must be a list of {{function: {{name, arguments}}}}.")
            message["tool_calls"] = []
            pending = []
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                    raise _bad(f"{where}.tool_calls[{j}] must be {{function: {{name, arguments}}}}.")
                call_id = f"call_{i}_{j}"
                pending.append((call_id, fn["name"]))
                message["tool_calls"].append({"id": call_id, "type": "function", "function": {
                    "name": fn["name"], "arguments": fn.get("arguments") or {}}})
        elif role == "tool":
            name = m.get("tool_name", m.get("name"))
            match = next((p for p in pending if p[1] == name), pending[0] if pending else None)
            if match is not None:
                pending.remove(match)
                message["tool_call_id"] = match[0]
            if isinstance(name, str):
                message["name"] = name
        out.append(message)
    return out


def _think(body: Mapping[str, Any]) -> bool:
    """Whether reasoning is shown (as `thinking`): unless `think` is false."""
    return _think_switch(body) is not False


def _think_switch(body: Mapping[str, Any]) -> bool | None:
    """`think` as the model's thinking switch (GenerationRequest.thinking): false turns a
    model's thinking off, as Ollama does (Qwen3's enable_thinking), so it spends no tokens
    on it; true or a level ("low", ...: not applied) on; absent: the model's default."""
    think = body.get("think")
    if think is not None and not isinstance(think, bool | str):
        raise _bad("'think' must be true, false, or \"low\" / \"medium\" / \"high\".")
    return None if think is None else think is not False




def _stream(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if not isinstance(stream, bool):
        raise _bad("'stream' must be true or false.")
    return stream


def _checked(chat: dict[str, Any], server: Any, body: Mapping[str, Any]) -> ChatCall:
    """The translated body through chat's checks, with `think` as the thinking switch."""
    check_numbers(chat)  # options' integers, now top-level, get the edge's bounds
    call = parse_chat(chat, server.runtime.settings.sampling)
    thinking = _think_switch(body)
    if thinking is None:
        return call
    return replace(call, request=replace(call.request, thinking=thinking))


# -- the routes ----------------------------------------------------------------------


class OllamaRoutes:
    """Ollama's endpoints over a ChatServer."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._body(request)
        model = _model(body, self.server)
        chat: dict[str, Any] = {"model": model, "messages": _messages(body.get("messages"))}
        keep_alive = _keep_alive(body)
        _options(body, chat)
        _format(body, chat)
        if body.get("tools") is not None:
            chat["tools"] = body["tools"]
        think, stream = _think(body), _stream(body)
        if not chat["messages"]:  # Ollama's "load the model" request
            return await self._load(model, keep_alive, {"message": {"role": "assistant",
                                                                    "content": ""}})
        call = _checked(chat, self.server, body)
        early = self._early(request, call, stream, chat=True)
        async with generation(self.server, call, "/api/chat", keep_alive, early) as (first, batches):
            return await self._answer(request, call, think, early, first, batches, chat=True)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await self.server._body(request)
        model = _model(body, self.server)
        for name, why in (("suffix", "fill-in-the-middle is not supported"),
                          ("template", "the model's own chat template is always used"),
                          ("context", "token arrays are not kept; send the conversation to "
                                      "/api/chat instead")):
            if body.get(name) not in (None, "", []):
                raise _bad(f"'{name}' is not supported: {why}.")
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise _bad("'prompt' must be a string.")
        keep_alive = _keep_alive(body)
        raw = body.get("raw", False)
        if not isinstance(raw, bool):
            raise _bad("'raw' must be true or false.")
        think, stream = _think(body), _stream(body)
        if not prompt and not body.get("images"):
            return await self._load(model, keep_alive, {"response": ""})
        messages: list[dict[str, Any]] = []
        system = body.get("system")
        if system not in (None, ""):
            if not isinstance(system, str):
                raise _bad("'system' must be a string.")
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": _content(prompt, body.get("images"), "body")})
        chat: dict[str, Any] = {"model": model, "messages": messages}
        _options(body, chat)
        _format(body, chat)
        call = _checked(chat, self.server, body)
        if raw:
            call = await self._raw(call, prompt)
        early = self._early(request, call, stream, chat=False)
        async with generation(self.server, call, "/api/generate", keep_alive,
                              early) as (first, batches):
            return await self._answer(request, call, think, early, first, batches, chat=False)

    async def _raw(self, call: ChatCall, prompt: str) -> ChatCall:
        """The prompt as is, no chat template: /v1/completions' check, then its request."""
        await admit_raw_prompt(self.server, call.model, prompt, "answers without 'raw' only")
        request: GenerationRequest = replace(call.request, messages=(), prompt=prompt)
        return replace(call, request=request)

    async def _load(self, model: str, keep_alive: float | None | str,
                    empty: dict[str, Any]) -> web.Response:
        """Ollama's empty request: load the model, or with keep_alive 0 unload it."""
        server = self.server
        if keep_alive == 0:
            key = await self._key_of(model)
            if key is not None:
                await server.local_models.unload(key)
            return json_response({"model": model, "created_at": _now(), **empty, "done": True,
                                  "done_reason": "unload"})
        backend = await server._backend_for(model)  # waits for the load, or says why it failed
        if backend.kind == "local":
            server.local_models.keep(backend.key, keep_alive)
        return json_response({"model": model, "created_at": _now(), **empty, "done": True,
                              "done_reason": "load"})

    async def _key_of(self, model: str) -> str | None:
        """The pool key of a local model by name, without loading it (404 if unknown)."""
        server = self.server
        if model == server.local_name():
            return server.runtime.model_key
        entry = await server.local_models.find(model)
        if entry is None:
            if model in server._remote_names():
                return None
            raise server._not_served(model)
        status = server.local_models.running_at(entry.path)
        return status.key if status is not None else None

    def _early(self, request: web.Request, call: ChatCall, stream: bool, *,
               chat: bool) -> EarlyStream | None:
        """A streamed answer opens while the prompt is prefilled: the status, then an empty
        line (no text, done false) every few seconds until the first token."""
        if not stream:
            return None
        empty = {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
        line = json.dumps({"model": call.model, "created_at": _now(), **empty, "done": False},
                          ensure_ascii=False).encode() + b"\n"
        return EarlyStream(request, self.server.limits.write_timeout_s, line, line,
                           content_type=NDJSON_HEADERS["Content-Type"])

    async def _answer(self, request: web.Request, call: ChatCall, think: bool,
                      early: EarlyStream | None, first: list[Event],
                      batches: AsyncIterator[list[Event]], *, chat: bool) -> web.StreamResponse:
        # from the request's arrival, as Ollama counts: prefill and load included
        started = request.get(STARTED_KEY, time.perf_counter())

        def piece(text: str = "", thinking: str = "", calls: list[ToolCall] | None = None
                  ) -> dict[str, Any]:
            if not chat:
                out = {"response": text}
                if thinking:
                    out["thinking"] = thinking
                return out
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = [{"function": {"name": c.name, "arguments": dict(c.arguments)}}
                                         for c in calls]
            return {"message": message}

        def final(done: Done | None, usage: Usage | None) -> dict[str, Any]:
            reason = done.finish_reason if done is not None else "stop"
            total = int((time.perf_counter() - started) * 1e9)
            out = {"done": True, "done_reason": "length" if reason == "length" else "stop",
                   "total_duration": total, "load_duration": 0}
            if usage is not None:
                prompt_ns = int(usage.ttft_ms * 1e6)
                eval_ns = (int(usage.completion_tokens / usage.decode_tps * 1e9)
                           if usage.decode_tps > 0 else 0)
                # the parts are the engine's, measured in the worker: never more than the whole
                out |= {"prompt_eval_count": usage.prompt_tokens,
                        "prompt_eval_duration": min(prompt_ns, total),
                        "eval_count": usage.completion_tokens,
                        "eval_duration": min(eval_ns, max(0, total - min(prompt_ns, total)))}
            return out

        head = {"model": call.model}
        if early is None:
            got = await collect(first, batches)
            if got.error is not None:
                raise api_error_for(got.error)
            body = {**head, "created_at": _now(),
                    **piece("".join(got.text), "".join(got.reasoning) if think else "", got.calls),
                    **final(Done(got.finish), got.usage)}
            return json_response(body)

        response, sink = await early.prepare()
        out = bytearray()
        usage: Usage | None = None

        def line(data: dict[str, Any]) -> None:
            out.extend(json.dumps({**head, "created_at": _now(), **data}, ensure_ascii=False).encode()
                       + b"\n")

        batch: list[Event] | None = first
        ended = False
        while batch is not None and not ended:
            text: list[str] = []
            reasoning: list[str] = []
            for event in batch:
                if isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, ReasoningDelta):
                    if think:
                        reasoning.append(event.text)
                elif isinstance(event, ToolCall):
                    if text or reasoning:
                        line({**piece("".join(text), "".join(reasoning)), "done": False})
                        text, reasoning = [], []
                    line({**piece(calls=[event]), "done": False})
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Error):  # the status is sent: the error is a line
                    out.extend(json.dumps({"error": api_error_for(event).message}).encode() + b"\n")
                    ended = True
                    break
                elif isinstance(event, Done):
                    if text or reasoning:
                        line({**piece("".join(text), "".join(reasoning)), "done": False})
                        text, reasoning = [], []
                    line({**piece(), **final(event, usage)})
                    ended = True
                    break
            if text or reasoning:
                line({**piece("".join(text), "".join(reasoning)), "done": False})
            if ended:
                break
            if out:
                if not await sink.send(out):
                    return response
                out.clear()
            batch = await anext(batches, None)
        try:
            async with asyncio.timeout(self.server.limits.write_timeout_s):
                await response.write_eof(bytes(out))
        except (ConnectionError, TimeoutError):
            pass
        return response

    # -- listings ------------------------------------------------------------------
    def _local(self) -> tuple[str, dict[str, Any], int, str]:
        """(name, details, size on disk, modified_at) of the local model."""
        rt = self.server.runtime
        info = rt.model.info or {}
        engine = str(info.get("engine") or "")
        path = Path(str(info.get("path") or ""))
        size, modified = 0, _now()
        try:
            if path.is_file():
                stat = path.stat()
                size, modified = stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC).isoformat()
            elif path.is_dir():
                files = [p for p in path.iterdir() if p.is_file()]
                size = sum(p.stat().st_size for p in files)
                if files:
                    modified = datetime.fromtimestamp(max(p.stat().st_mtime for p in files),
                                                      UTC).isoformat()
        except OSError:
            pass
        family = str(info.get("model_type") or engine or "unknown")
        details = {"parent_model": "", "format": "gguf" if engine == "llamacpp" else engine or "",
                   "family": family, "families": [family], "parameter_size": "",
                   "quantization_level": str(info.get("quant") or "").upper()}
        entry = self.server.local_models.app_entry()  # its catalog entry: size and quant
        if entry is not None:
            details |= {k: v for k, v in _details(entry).items()
                        if k in ("parameter_size", "quantization_level") and v}
        return self.server.local_name(), details, size, modified

    def _entries(self) -> list[dict[str, Any]]:
        out = []
        if self.server.model_health()[0] != "failed":
            name, details, size, modified = self._local()
            out.append({"name": name, "model": name, "modified_at": modified, "size": size,
                        "digest": _digest(name), "details": details})
        for entry in self.server.local_models.catalog.cached():
            if entry.id in {e["name"] for e in out} or self.server.local_models.is_app_model(entry):
                continue  # the app's model: listed once, above
            modified = datetime.fromtimestamp(entry.modified or time.time(), UTC).isoformat()
            out.append({"name": entry.id, "model": entry.id, "modified_at": modified,
                        "size": entry.size_bytes, "digest": _digest(entry.id),
                        "details": _details(entry)})
        for name, (endpoint, _) in self.server._remote_names().items():
            out.append({"name": name, "model": name, "modified_at": _now(), "size": 0,
                        "digest": _digest(name), "details": {"format": f"remote:{endpoint}",
                                                             "family": "", "families": []}})
        return out

    async def tags(self, request: web.Request) -> web.Response:
        await self.server.local_models.entries()  # the disk's list, at most a few seconds old
        return json_response({"models": self._entries()})

    async def ps(self, request: web.Request) -> web.Response:
        """Every loaded model: what admission counts for it (or its workers' memory, when
        larger) as its size, and when its idle time runs out."""
        server, rt = self.server, self.server.runtime
        await server.local_models.entries()  # the ids (the app's model's too) come from it
        out = []
        for key, status in server.local_models.running().items():
            if status.state == "loading":
                continue
            if key == rt.model_key:
                name, details, _, _ = self._local()
                context = rt.model.context_size
            else:
                name = server.local_models.name_of(status)
                entry = server.local_models.catalog.by_path(status.path)
                details = _details(entry) if entry else {}
                facts = server.local_models.facts(key)
                context = facts.context_size if facts else rt.settings.context_size
            expires = describe(status)["expires_at"] or 4102444800  # kept: 2100
            out.append({"name": name, "model": name,
                        "size": max(status.memory_bytes, status.rss_bytes),
                        "digest": _digest(name), "details": details, "size_vram": 0,
                        "expires_at": datetime.fromtimestamp(expires, UTC).isoformat(),
                        "context_length": context})
        return json_response({"models": out})

    async def show(self, request: web.Request) -> web.Response:
        body = await self.server._body(request)
        model = _model(body, self.server)
        if model != self.server.local_name():
            entry = await self.server.local_models.find(model)
            if entry is not None and not self.server.local_models.is_app_model(entry):
                return json_response({"details": _details(entry), "model_info": {
                    "general.architecture": entry.family}, "capabilities": ["completion"]
                    + (["vision"] if entry.vision else []), "template": "", "parameters": "",
                    "modelfile": f"# served by llmdeck\nFROM {entry.id}\n"})
            if entry is None:
                await self.server._backend_for(model)  # 404 (or a remote: little to show)
                return json_response({"details": {"format": "remote"}, "model_info": {},
                                      "capabilities": ["completion"], "template": "",
                                      "parameters": "", "modelfile": ""})
        rt = self.server.runtime
        name, details, _, modified = self._local()
        info = rt.model.info or {}
        template = str(info.get("chat_template") or "")
        capabilities = ["completion"]
        if "tools" in template:
            capabilities.append("tools")
        if "<think>" in template or info.get("reasoning"):
            capabilities.append("thinking")
        if info.get("vision"):
            capabilities.append("vision")
        family = details["family"]
        return json_response({
            "modelfile": f"# served by llmdeck\nFROM {name}\n", "parameters": "",
            "template": template, "details": details, "modified_at": modified,
            "model_info": {"general.architecture": family,
                           f"{family}.context_length": rt.model.context_size},
            "capabilities": capabilities})

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": OLLAMA_API_VERSION})


def _details(entry: Any) -> dict[str, Any]:
    """Ollama's `details` of a catalog entry (core.model_catalog)."""
    tag = entry.id.split(":", 1)[1] if ":" in entry.id else ""
    size = tag.split("-", 1)[0] if tag[:1].isdigit() else ""
    return {"parent_model": "", "format": entry.format, "family": entry.family,
            "families": [entry.family], "parameter_size": size.upper(),
            "quantization_level": (entry.quant or "").upper()}


def _digest(name: str) -> str:
    """An id for the name (Ollama's is a hash of the weights; reading gigabytes to list
    models is not worth it, and clients only compare digests)."""
    return hashlib.sha256(name.encode()).hexdigest()


def add_routes(app: web.Application, server: Any) -> None:
    routes = OllamaRoutes(server)
    wrap = guarded(render_error)
    app.router.add_post("/api/chat", wrap(routes.chat))
    app.router.add_post("/api/generate", wrap(routes.generate))
    app.router.add_get("/api/tags", wrap(routes.tags))
    app.router.add_post("/api/show", wrap(routes.show))
    app.router.add_get("/api/ps", wrap(routes.ps))
    app.router.add_get("/api/version", wrap(routes.version))
