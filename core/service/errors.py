"""A face call's error as data: what the service raised, rebuilt in the client.

The in-process app catches the face's own errors (StoreError, McpCallError, LookupError,
an OSError of a full disk, ...) and words them. Over the socket the same call must fail
the same way, so a failed call's answer names the error's type from an allowlist (never
a class the client would build from a name it was sent), with its sentence, its
arguments and its plain fields:

    {"id": 7, "error": {"code": "FAILED", "message": "<sentence>", "type": "StoreError",
                        "args": ["..."], "fields": {"code": "DISK_FULL", ...}}}

The client raises an exception that is both the named type and a ServiceCallError, so
`except StoreError` and `except ServiceCallError` both hold. A type outside the list
travels as its nearest listed ancestor (an unlisted ValueError subclass is a
ValueError); one with none is a plain ServiceCallError whose sentence names it. Nothing
the service raises ends a client: the worst is a sentence.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

# tag -> "module:attribute" of an exception a face call may raise (looked up lazily, on
# the client, the first time that tag arrives). The module is where the class is defined
# (its __module__): the wire types' errors live in core.wire.
ERRORS: dict[str, str] = {
    # core's own, each with a sentence a person can act on
    "StoreError": "core.wire.store:StoreError",
    "HubError": "core.wire.hub:HubError",
    "WorkerLoadError": "core.workers.load_error:WorkerLoadError",
    "EngineLoadError": "core.engines.base:EngineLoadError",
    "SelectionError": "core.engines.select:SelectionError",
    "McpCallError": "core.wire.tools:McpCallError",
    "HomeLockError": "core.home_lock:HomeLockError",
    "SettingsRefused": "core.wire.settings_rules:Refused",
    "KeepAliveError": "core.keep_alive:KeepAliveError",
    "AmbiguousModel": "core.model_catalog:AmbiguousModel",
    "RemoteError": "core.remote.client:RemoteError",
    "RemoteReadError": "core.remote.reading:RemoteReadError",
    "ClusterError": "core.cluster.launch:ClusterError",
    "GGUFImportError": "core.engines.gguf_import:GGUFImportError",
    "MlxFolderError": "core.model_files.mlx_folder:MlxFolderError",
    "VisionError": "core.vision.worker:VisionError",
    "UtilityWorkerError": "core.docs.worker:UtilityWorkerError",
    "JailError": "core.tools.sandbox.jail:JailError",
    "ChannelError": "core.tools.sandbox.channel:ChannelError",
    "HttpFaceError": "core.service.http_face:HttpFaceError",
    "SocketFolderError": "core.service.socket_path:SocketFolderError",
    # Python's, which the face raises with a sentence (LookupError("That message no
    # longer exists."), an OSError of a full disk)
    "LookupError": "builtins:LookupError",
    "KeyError": "builtins:KeyError",
    "ValueError": "builtins:ValueError",
    "TypeError": "builtins:TypeError",
    "RuntimeError": "builtins:RuntimeError",
    "NotImplementedError": "builtins:NotImplementedError",
    "TimeoutError": "builtins:TimeoutError",
    "OSError": "builtins:OSError",
    "FileNotFoundError": "builtins:FileNotFoundError",
    "FileExistsError": "builtins:FileExistsError",
    "PermissionError": "builtins:PermissionError",
    "IsADirectoryError": "builtins:IsADirectoryError",
    "NotADirectoryError": "builtins:NotADirectoryError",
    "ConnectionError": "builtins:ConnectionError",
}
_TAG_OF = {where.replace(":", "."): tag for tag, where in ERRORS.items()}
_PLAIN = (str, int, float, bool, type(None))
MAX_TEXT = 2000  # a sentence, an argument: never a page


def sentence(exc: BaseException) -> str:
    """What a person reads: the error's own sentence where it has one (StoreError.message,
    WorkerLoadError.message, LookupError's text), else one that names it."""
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message:
        return message[:MAX_TEXT]
    text = str(exc)
    if text and (_ours(exc) or isinstance(exc, (LookupError, ValueError, OSError))):
        return text[:MAX_TEXT]  # written for a person (core's errors, "No such file")
    detail = f": {text[:200]}" if text else ""
    return f"The service could not do that ({type(exc).__name__}{detail}); see the service log."


def _ours(exc: BaseException) -> bool:
    tag = tag_of(exc)
    return tag is not None and not ERRORS[tag].startswith("builtins:")


def tag_of(exc: BaseException) -> str | None:
    """The listed type `exc` is, or its nearest listed ancestor; None when it has none."""
    for cls in type(exc).__mro__:
        tag = _TAG_OF.get(f"{cls.__module__}.{cls.__qualname__}")
        if tag is not None:
            return tag
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return value if isinstance(value, _PLAIN) else None


def describe(exc: BaseException, code: str, text: str | None = None) -> dict[str, Any]:
    """The error object of a failed call's answer (protocol.error's shape, and more)."""
    out: dict[str, Any] = {"code": code, "message": text or sentence(exc)}
    tag = tag_of(exc)
    if tag is None:
        return out
    out["type"] = tag
    if type(exc).__name__ != tag:
        out["raised"] = type(exc).__name__  # a listed ancestor stands in: say what it was
    out["args"] = [_plain(a) for a in exc.args[:4]]
    fields = getattr(exc, "__dict__", {})
    out["fields"] = {k: _plain(v) for k, v in list(fields.items())[:16]
                     if isinstance(k, str) and not k.startswith("_") and isinstance(v, _PLAIN)}
    return out


def answer(exc: BaseException, code: str, call_id: Any, text: str | None = None) -> dict[str, Any]:
    """The whole answer to a call that raised `exc`."""
    out: dict[str, Any] = {"error": describe(exc, code, text)}
    if call_id is not None:
        out["id"] = call_id
    return out


def _listed(tag: Any) -> type[BaseException] | None:
    where = ERRORS.get(tag) if isinstance(tag, str) else None
    if where is None:
        return None
    module, attr = where.split(":")
    try:
        found = getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None
    return found if isinstance(found, type) and issubclass(found, Exception) else None


@functools.cache
def _both(cls: type[BaseException], base: type[Exception]) -> type[Exception]:
    """`cls` that is also a ServiceCallError (cached: one class per listed type)."""
    try:
        return type(cls.__name__, (cls, base), {"__module__": cls.__module__,
                                                "__qualname__": cls.__qualname__})
    except TypeError:  # a layout that cannot be mixed: the plain ServiceCallError
        return base


def rebuild(err: dict[str, Any], base: type[Exception]) -> Exception:
    """The client's exception for a failed call's error object: the listed type (also a
    `base`, ServiceCallError, with .code and .message), or a plain `base`."""
    code = str(err.get("code", "?"))
    message = str(err.get("message", ""))
    cls = _listed(err.get("type"))
    if cls is None:
        return base(code, message)
    mixed = _both(cls, base)
    if mixed is base:
        return base(code, message)
    args = [a for a in err.get("args") or () if isinstance(a, _PLAIN)] or [message]
    try:
        exc = mixed.__new__(mixed, *args)
        exc.args = tuple(args)
    except Exception:  # noqa: BLE001 - a constructor we cannot feed: the sentence stands
        return base(code, message)
    fields = err.get("fields") if isinstance(err.get("fields"), dict) else {}
    for key, value in {**fields, "code": fields.get("code", code), "message": message}.items():
        if isinstance(key, str) and not key.startswith("_") and isinstance(value, _PLAIN):
            try:
                setattr(exc, key, value)
            except (AttributeError, TypeError):
                pass
    if err.get("raised"):
        exc.raised = str(err["raised"])[:80]  # type: ignore[attr-defined]
    return exc
