"""The face's values as JSON: dataclasses as tagged dicts, from an allowlist only.

A value crossing the socket is plain JSON, or a dataclass written as
{"$type": "<Tag>", <field>: <value>, ...}. Decoding looks the tag up in TYPES (short
names the protocol owns, each pointing at a public name of a core package face) and
builds the class from exactly its fields; an unknown tag or field is refused, so a
client can never make the service build anything else (this is why it is not pickle).
Tuples, paths and times keep their type ({"$tuple": [...]}, {"$path": "..."},
{"$datetime": "<ISO 8601>"}), and a plain dict
whose keys start with "$" (a model's tool arguments could) is wrapped ({"$dict": {...}})
so it can never pass for a tag.

The classes are resolved lazily, the first time a tag is met: a client such as
`llmdeck workers` pays only for what it receives.
"""

from __future__ import annotations

import dataclasses
import importlib
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any

# tag -> (modules to look in, first found wins; attribute). The wire types live in
# core.wire (a client decodes them without loading the packages that make them); the
# owning package follows as the fallback where a name is moving between rooms.
TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "TextDelta": (("core.events",), "TextDelta"),
    "ReasoningDelta": (("core.events",), "ReasoningDelta"),
    "ToolCall": (("core.events",), "ToolCall"),
    "ToolCallDelta": (("core.events",), "ToolCallDelta"),
    "Usage": (("core.events",), "Usage"),
    "Logprobs": (("core.events",), "Logprobs"),
    "PromptRead": (("core.events",), "PromptRead"),
    "Done": (("core.events",), "Done"),
    "Error": (("core.events",), "Error"),
    "ToolStatus": (("core.wire.tools", "core.tools"), "ToolStatus"),
    "Conversation": (("core.wire.store", "core.store"), "Conversation"),
    "Message": (("core.wire.store", "core.store"), "Message"),
    "SearchHit": (("core.wire.store", "core.store"), "SearchHit"),
    "WorkerStatus": (("core.wire.workers", "core.workers"), "WorkerStatus"),
    "LocalModel": (("core.wire.hub", "core.hub"), "LocalModel"),
    "SearchResult": (("core.wire.hub",), "SearchResult"),
    "Runnable": (("core.wire.hub",), "Runnable"),
    "RepoListing": (("core.wire.hub",), "RepoListing"),
    "RepoFileInfo": (("core.wire.hub",), "RepoFileInfo"),
    "Recommendation": (("core.wire.hub",), "Recommendation"),
    "Fit": (("core.wire.hub",), "Fit"),
    "ModelState": (("core.runtime",), "ModelState"),
    "SandboxInfo": (("core.runtime",), "SandboxInfo"),
    "LiveTurnInfo": (("core.runtime",), "LiveTurnInfo"),
    "RunResult": (("core.wire.tools", "core.tools"), "RunResult"),
    "ModelSpec": (("core.engines.base",), "ModelSpec"),
    "CompareRefused": (("core.wire.compare", "core.runtime.compare"), "CompareRefused"),
    "BlockRun": (("core.wire.tools", "core.tools", "core.tools.fenced"), "BlockRun"),
    "DocAttachment": (("core.wire.docs", "core.docs"), "Attachment"),
    "Mention": (("core.wire.docs", "core.docs"), "Mention"),
    "MentionResolution": (("core.wire.docs", "core.docs"), "MentionResolution"),
    "DocError": (("core.wire.docs", "core.docs"), "DocError"),
    "AttachError": (("core.attach_errors",), "AttachError"),  # DocError's own name
    "AttachResult": (("core.runtime", "core.runtime.context", "core.chat_context"), "AttachResult"),
    "AttachedImage": (("core.wire.vision", "core.vision"), "AttachedImage"),
    "StoredImage": (("core.wire.vision", "core.vision"), "StoredImage"),
    "RolloverMarker": (("core.wire.memory", "core.memory"), "RolloverMarker"),
    "Settings": (("core.config",), "Settings"),
    "Sampling": (("core.config",), "Sampling"),
    "RemoteEndpoint": (("core.config",), "RemoteEndpoint"),
    "McpServerConfig": (("core.config",), "McpServerConfig"),
    "ClusterConfig": (("core.config",), "ClusterConfig"),
}
MAX_DEPTH = 64


class CodecError(ValueError):
    """A value that may not cross: an unknown tag or field, a type outside the list."""


_by_class: dict[type, str] = {}
_by_tag: dict[str, type] = {}


def _resolve(tag: str) -> type:
    cls = _by_tag.get(tag)
    if cls is not None:
        return cls
    entry = TYPES.get(tag)
    if entry is None:
        raise CodecError(f"unknown type tag {tag!r}")
    modules, attr = entry
    for name in modules:
        try:
            found = getattr(importlib.import_module(name), attr, None)
        except ImportError:
            continue
        if isinstance(found, type) and dataclasses.is_dataclass(found):
            _by_tag[tag], _by_class[found] = found, tag
            return found
    raise CodecError(f"type {tag!r} is not available here")


def _tag_of(cls: type) -> str:
    tag = _by_class.get(cls)
    if tag is not None:
        return tag
    # Tags whose attribute has the class's name first; then the rest (a name that is an
    # alias of another, as core.docs.DocError is of AttachError, is found either way).
    ordered = sorted(TYPES.items(), key=lambda item: item[1][1] != cls.__name__)
    for candidate, _ in ordered:
        if candidate not in _by_tag:
            try:
                _resolve(candidate)
            except CodecError:
                continue
            if _by_class.get(cls) is not None:
                return _by_class[cls]
    raise CodecError(f"{cls.__module__}.{cls.__qualname__} may not cross the socket")


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as JSON data (raises CodecError for what is not on the list)."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        out = {str(k): encode(v, depth + 1) for k, v in value.items()}
        return {"$dict": out} if any(k.startswith("$") for k in out) else out
    if isinstance(value, PurePath):
        return {"$path": str(value)}
    if isinstance(value, datetime):  # a search row's last change
        return {"$datetime": value.isoformat()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        tag = _tag_of(type(value))
        out = {"$type": tag}
        for f in dataclasses.fields(value):
            if f.init:
                out[f.name] = encode(getattr(value, f.name), depth + 1)
        return out
    raise CodecError(f"a {type(value).__name__} may not cross the socket")


def decode(data: Any, depth: int = 0) -> Any:
    """JSON data back into values; CodecError for a tag or field outside the list."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if not isinstance(data, dict):
        return data
    if "$type" in data:
        cls = _resolve(str(data["$type"]))
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        given = {k: v for k, v in data.items() if k != "$type"}
        unknown = set(given) - names
        if unknown:
            raise CodecError(f"{data['$type']} has no field {sorted(unknown)[0]!r}")
        try:
            return cls(**{k: decode(v, depth + 1) for k, v in given.items()})
        except (TypeError, ValueError) as exc:
            raise CodecError(f"{data['$type']}: {exc}") from None
    if len(data) == 1:
        key, inner = next(iter(data.items()))
        if key == "$tuple" and isinstance(inner, list):
            return tuple(decode(v, depth + 1) for v in inner)
        if key == "$path" and isinstance(inner, str):
            return Path(inner)
        if key == "$datetime" and isinstance(inner, str):
            try:
                return datetime.fromisoformat(inner)
            except ValueError:
                raise CodecError(f"{inner[:40]!r} is not a date and time") from None
        if key == "$dict" and isinstance(inner, dict):
            return {k: decode(v, depth + 1) for k, v in inner.items()}
    if any(k.startswith("$") for k in data):
        raise CodecError(f"unknown tagged value {sorted(data)[0]!r}")
    return {k: decode(v, depth + 1) for k, v in data.items()}
