"""The tools of a request: how many it may send, and their schemas checked off the loop.

A schema check (jsonschema's check_schema) costs a millisecond or two; 5,000 tools in one
request held the event loop for seconds, and every other request (a /health) waited.
So, at the edge, for every dialect (each keeps its tools under `tools`):

- a request with more than MAX_TOOLS tools is refused (400, in its dialect's shape)
  before anything else looks at them (core.server.limits.refuse_too_many_tools);
- the schemas are checked in a worker thread (`prepare`), and the outcome is kept by
  content: an agent sends the same tools every turn, so the next turn's check is a
  lookup. core.server.wire asks `known_problem` for each schema when it builds the
  request, and checks on the loop only one it was not given (never more than MAX_TOOLS).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

MAX_TOOLS = 512  # OpenAI takes 128; an agent with many MCP servers sends a few hundred
CACHE_ENTRIES = 4096
_UNKNOWN = object()

# This request's schemas by identity (the dialects pass the same objects on to wire).
_checked: ContextVar[dict[int, tuple[Any, str | None]] | None] = ContextVar(
    "llmdeck_tool_schemas", default=None)


class _Cache:
    """Schema content (a digest of its canonical JSON) -> its problem, or None when it
    compiles; least recently used dropped past CACHE_ENTRIES."""

    def __init__(self) -> None:
        self._entries: OrderedDict[bytes, str | None] = OrderedDict()
        self._lock = threading.Lock()
        self.checks = 0  # schemas actually checked (for tests)

    def get(self, key: bytes) -> Any:
        with self._lock:
            if key not in self._entries:
                return _UNKNOWN
            self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key: bytes, problem: str | None) -> None:
        with self._lock:
            self._entries[key] = problem
            self._entries.move_to_end(key)
            while len(self._entries) > CACHE_ENTRIES:
                self._entries.popitem(last=False)


cache = _Cache()


def _schemas(body: Any) -> list[Any]:
    """Each tool's parameter schema, however the dialect spells it (OpenAI and Ollama:
    function.parameters; Anthropic: input_schema; Responses: parameters)."""
    tools = body.get("tools") if isinstance(body, Mapping) else None
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function")
        for schema in ((fn.get("parameters") if isinstance(fn, Mapping) else None),
                       tool.get("input_schema"), tool.get("parameters")):
            if isinstance(schema, Mapping):
                out.append(schema)
    return out


def _key(schema: Mapping[str, Any]) -> bytes | None:
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def problem_of(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` is not a JSON schema (jsonschema's sentence, with where), or None."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        at = "".join(f"[{p!r}]" for p in exc.path)
        return exc.message + (f" (at {at})" if at else "")
    except RecursionError:
        return "it is nested too deeply"
    return None


def _cached_problem(schema: Any, check: Callable[[Mapping[str, Any]], str | None]
                    = problem_of) -> str | None:
    """The schema's problem from the cache, else checked now (and cached)."""
    key = _key(schema)
    found = cache.get(key) if key is not None else _UNKNOWN
    if found is _UNKNOWN:
        found = check(schema)
        cache.checks += 1
        if key is not None:
            cache.put(key, found)
    return found


def _check_all(schemas: list[Any]) -> dict[int, tuple[Any, str | None]]:
    """In a worker thread: every schema's problem, from the cache or checked now."""
    return {id(schema): (schema, _cached_problem(schema)) for schema in schemas}


async def prepare(body: Any) -> None:
    """Every schema of the body (within MAX_TOOLS: core.server.limits refused more)
    checked in a thread; the outcomes wait for core.server.wire (same task) in a
    context variable."""
    schemas = _schemas(body)
    if schemas:
        _checked.set(await asyncio.to_thread(_check_all, schemas))


def known_problem(schema: Mapping[str, Any], check: Callable[[Mapping[str, Any]], str | None]
                  = problem_of) -> str | None:
    """The schema's problem: as `prepare` found it, else from the cache, else checked now
    (on the caller's thread, and cached)."""
    seen = _checked.get()
    if seen is not None:
        entry = seen.get(id(schema))
        if entry is not None and entry[0] is schema:
            return entry[1]
    return _cached_problem(schema, check)
