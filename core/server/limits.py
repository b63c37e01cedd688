"""Bounds on what a request may be, checked at the edge before any model work.

`llmdeck serve` faces programs that may be broken or hostile. Everything here runs on
the raw body before a request is queued or tokenised: bytes must be UTF-8 JSON, numbers
finite, nesting shallow, text free of lone surrogates (a prompt that cannot be encoded
would otherwise fail deep inside an engine), integer parameters within what an engine
can take, and a prompt no longer in characters than the model's context could hold in
tokens. Each refusal is an ApiError naming the offending parameter, so the client can
fix it; none of them spends model time.

Kept apart from core.server.wire (which maps OpenAI fields onto a GenerationRequest)
so the two concerns can change independently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from core.engines.base import GenerationRequest
from core.server.wire import ApiError

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_NESTING = 64  # a tool's JSON schema nests a dozen levels at most
MAX_INT = 2**31 - 1  # what llama.cpp and MLX take for token counts and top_k
MAX_SEED = 2**63 - 1
# No tokenizer we know packs more characters into one token (long runs of spaces or of
# "=" are the longest, 16-64 chars); a prompt with more characters than context * this
# cannot fit, so it is refused without being tokenised.
MAX_CHARS_PER_TOKEN = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_PARAMS = ("max_tokens", "max_completion_tokens", "top_k", "n", "top_logprobs")


def refuse_too_many_tools(body: Any) -> None:
    """400 when the body offers more than MAX_TOOLS tools (in any dialect they sit under
    `tools`): a count, before anything looks at them (core.server.tool_schemas)."""
    from core.server.tool_schemas import MAX_TOOLS

    tools = body.get("tools") if isinstance(body, Mapping) else None
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        raise ApiError(400, f"'tools' lists {len(tools):,} tools; this server takes at most "
                       f"{MAX_TOOLS} in one request. Send the tools this conversation needs.",
                       param="tools", code="too_many_tools")


def too_large(size: int | None) -> ApiError:
    """413 naming the body's size (when known) and the limit."""
    limit = f"{MAX_BODY_BYTES:,} bytes ({MAX_BODY_BYTES // (1024 * 1024)} MiB)"
    said = f"is {size:,} bytes" if size else "is larger than that"
    return ApiError(413, f"The request body {said}; this server accepts at most {limit}. "
                    "Send a shorter conversation.", code="request_too_large")


class _NotFinite(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _no_constant(name: str) -> Any:
    raise _NotFinite(name)


def load_body(raw: bytes) -> Any:
    """The body as JSON, or a 400 saying why not (not UTF-8, not JSON, NaN/Infinity, too
    deep for the parser)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"The request body is not UTF-8 text (invalid byte at offset "
                       f"{exc.start}).", code="invalid_json") from None
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except _NotFinite as exc:
        raise ApiError(400, f"The request body holds the number {str(exc)[:40]}, which is not "
                       "finite; JSON numbers must be finite.", code="invalid_json") from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise ApiError(400, f"The request body is not valid JSON ({str(exc)[:120]}).",
                       code="invalid_json") from None


def _too_deep(where: str = "The request body") -> ApiError:
    return ApiError(400, f"{where} is nested more than {MAX_NESTING} levels deep; this server "
                    f"accepts at most {MAX_NESTING}.", code="invalid_json")


def check_shape(body: Any) -> None:
    """Nesting depth and text: every string (keys too) must be encodable as UTF-8.

    A lone surrogate ("\\ud800") is valid JSON but not text; refused here, it can never
    reach a tokenizer.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(body, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                _bad_text(path, value)
        elif isinstance(value, Mapping | list):
            if len(path) >= MAX_NESTING:
                raise _too_deep(_where(path))
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    _bad_text((*path, key), key)
                if isinstance(item, str | Mapping | list):
                    stack.append((item, (*path, key)))


def _where(path: tuple[str | int, ...]) -> str:
    """A JSON path for messages ("messages[0].content"); a key that is not printable text
    is shown escaped and cut short, so the error itself can be sent."""
    if not path:
        return "The request body"
    out = _show(path[0])
    for part in path[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{_show(part)}"
    return out


def _show(part: str | int) -> str:
    text = str(part)
    if len(text) > 40:
        text = text[:40] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_text(path: tuple[str | int, ...], value: str) -> None:
    match = _SURROGATE.search(value)
    assert match is not None
    where = _where(path)
    raise ApiError(400, f"{where} contains a lone UTF-16 surrogate (U+{ord(match.group()):04X}) "
                   f"at character {match.start()}, which is not valid Unicode text. Send the "
                   "text as UTF-8, or as a complete surrogate pair.", param=where,
                   code="invalid_value")


def check_numbers(body: Any) -> None:
    """Every top-level number finite; integer parameters within what an engine can take."""
    if not isinstance(body, Mapping):
        return
    for name, value in body.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ApiError(400, f"'{name}' must be a finite number (got {value}).", param=name,
                           code="invalid_value")
    for name in _INT_PARAMS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ApiError(400, f"'{name}' must be at most {MAX_INT} (got {str(value)[:40]}).",
                           param=name, code="invalid_value")
    seed = body.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= MAX_SEED:
        raise ApiError(400, f"'seed' must be between 0 and {MAX_SEED} (got {str(seed)[:40]}).",
                       param="seed", code="invalid_value")


def prompt_chars(request: GenerationRequest) -> int:
    """Characters the chat template will render, not counting its own markup."""
    total = 0
    for message in request.messages:
        for value in message.values():
            total += len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))
    for tool in request.tools:
        total += len(json.dumps(tool, ensure_ascii=False))
    return total


def renders_no_tools(request: GenerationRequest, info: Mapping[str, Any]) -> bool:
    """Whether the model leaves this request's tools out of its prompt: a base model (a
    plain transcript) or a chat template that never mentions them, unless the request
    forces a call (the engine then writes the tools into a system note itself)."""
    if not request.tools or request.tool_choice == "required" or request.tool_name is not None:
        return False
    if info.get("base_model"):
        return True
    template = info.get("chat_template")
    return isinstance(template, str) and bool(template) and "tools" not in template


def check_prompt_size(request: GenerationRequest, context_tokens: int,
                      info: Mapping[str, Any] | None = None) -> None:
    """400 (context_length_exceeded) for a prompt too long to fit however it tokenises.
    Tools the model's template leaves out (`info`: the model's load info) are not counted:
    an agent's tool list can be most of its request, and this model never reads it."""
    if context_tokens <= 0:
        return
    if info is not None and renders_no_tools(request, info):
        request = replace(request, tools=())
    chars = prompt_chars(request)
    limit = context_tokens * MAX_CHARS_PER_TOKEN
    if chars > limit:
        raise ApiError(400, f"The messages are {chars:,} characters long; this model's context "
                       f"is {context_tokens:,} tokens, which holds at most {limit:,} characters "
                       "however they tokenise. Send a shorter conversation.",
                       param="messages", code="context_length_exceeded")
