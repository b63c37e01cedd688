"""One schema per socket call: every argument is checked at the door, before any work.

A call's arguments come from a client, and a client can be a script, a broken build or
a probe. Each call names its arguments here (CALLS); a value of the wrong type, a
missing one, an unknown one, a number out of range or a string that is not text is
answered BAD_CALL with a sentence naming the field, and an id that names nothing where
something must exist (the conversation a reply goes into, the message to regenerate)
NOT_FOUND, instead of a TypeError or an IntegrityError from deep inside. Reading calls
keep their gentle answers for ids that are gone (an empty page, None): two windows may
race a delete, and the other one should not see an error for it.

The table must name every call of core.service.dispatch (a test holds the two in step).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from core.service.protocol import BAD_CALL, NOT_FOUND, SUBSCRIPTION_TOPICS, valid_id

MAX_ID_CHARS = 200  # ids are 32 hex characters; a session or ask id a little more
MAX_NAME_CHARS = 4096  # titles, model references, tool and server names, hosts
MAX_PAGE = 10_000  # a page of conversations, messages or hits
MAX_LIST = 10_000  # message ids for branch positions
MAX_PATHS = 256  # files attached at once
MAX_CONTEXT = 1 << 24  # tokens: above any model's context (the settings' rule is tighter)
_SURROGATE = re.compile("[\ud800-\udfff]")

Check = Callable[[str, Any], Any]  # raises ArgError; a value returned replaces the argument


class ArgError(Exception):
    """An argument refused at the door: `code` (BAD_CALL, NOT_FOUND) and the sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _bad(field: str, want: str, value: Any) -> ArgError:
    return ArgError(BAD_CALL, f"{field} must be {want} (got {_kind(value)}).")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return f"the number {text if len(text) <= 24 else text[:21] + '...'}"
    if isinstance(value, str):
        return f"a string of {len(value):,} characters"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,}"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


# -- value checks ---------------------------------------------------------------------------

def _text_value(field: str, value: Any, limit: int | None) -> None:
    if not isinstance(value, str):
        raise _bad(field, "text", value)
    if limit is not None and len(value) > limit:
        raise ArgError(BAD_CALL, f"{field} is {len(value):,} characters; at most {limit:,}.")
    if _SURROGATE.search(value):
        raise ArgError(BAD_CALL, f"{field} holds a lone surrogate (\\ud800-\\udfff), which is "
                       "not text that can be stored.")


def text(limit: int | None = None, *, empty: bool = True) -> Check:
    def check(field: str, value: Any) -> None:
        _text_value(field, value, limit)
        if not empty and not value:
            raise ArgError(BAD_CALL, f"{field} must not be empty.")
    return check


def ident() -> Check:
    """An id the service handed out: short, non-empty text."""
    def check(field: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise _bad(field, "an id (non-empty text)", value)
        _text_value(field, value, MAX_ID_CHARS)
    return check


def call_id() -> Check:
    """A call id this client picked (core.service.protocol.valid_id)."""
    def check(field: str, value: Any) -> None:
        if not valid_id(value):
            raise _bad(field, "a call id (a small whole number or short text)", value)
    return check


def whole(low: int, high: int) -> Check:
    def check(field: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(field, f"a whole number from {low:,} to {high:,}", value)
        if not low <= value <= high:
            raise ArgError(BAD_CALL, f"{field} must be from {low:,} to {high:,} (got {_kind(value)}).")
    return check


def seconds(*, zero: bool) -> Check:
    def check(field: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > 10**7:
            raise _bad(field, "a number of seconds" + (", 0 or more" if zero else ", above 0"), value)
    return check


def one_of(*choices: Any) -> Check:
    def check(field: str, value: Any) -> None:
        if not any(type(value) is type(c) and value == c for c in choices):  # 1.0 is not 1
            shown = ", ".join(repr(c) for c in choices)
            raise ArgError(BAD_CALL, f"{field} must be one of {shown} (got {_kind(value)}).")
    return check


def path(*, absolute: bool = False) -> Check:
    """A file path, as text or {"$path": ...}; handed on as a Path."""
    def check(field: str, value: Any) -> Path:
        if isinstance(value, PurePath):
            value = str(value)
        _text_value(field, value, MAX_NAME_CHARS)
        if not value or "\x00" in value:
            raise ArgError(BAD_CALL, f"{field} must be a file path (non-empty, no NUL).")
        if absolute and not Path(value).expanduser().is_absolute():
            raise ArgError(BAD_CALL, f"{field} must be an absolute path (the service's working "
                           "folder is not yours).")
        return Path(value)
    return check


def list_of(item: Check, most: int) -> Check:
    def check(field: str, value: Any) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            raise _bad(field, "a list", value)
        if len(value) > most:
            raise ArgError(BAD_CALL, f"{field} has {len(value):,} items; at most {most:,}.")
        out = []
        for i, v in enumerate(value):
            checked = item(f"{field}[{i}]", v)
            out.append(v if checked is None else checked)
        return out
    return check


def instance(type_name: str, extra: Callable[[str, Any], None] | None = None) -> Check:
    """A value the codec built from its tag (ModelSpec, Settings), then its own checks."""
    def check(field: str, value: Any) -> None:
        if type(value).__name__ != type_name or not dataclasses.is_dataclass(value):
            raise _bad(field, f"a {type_name} ({{\"$type\": \"{type_name}\", ...}})", value)
        if extra is not None:
            extra(field, value)
    return check


def _model_spec(field: str, spec: Any) -> None:
    text(MAX_NAME_CHARS, empty=False)(f"{field}.path", spec.path)
    text(64, empty=False)(f"{field}.engine", spec.engine)
    whole(1, 2**24)(f"{field}.context_size", spec.context_size)
    options = spec.options
    if not isinstance(options, (tuple, list)) or len(options) > 64 or not all(
            isinstance(o, (tuple, list)) and len(o) == 2 and isinstance(o[0], str) for o in options):
        raise _bad(f"{field}.options", "a list of [name, value] pairs", options)


def _settings(field: str, settings: Any) -> None:
    """The settings a client saves obey the settings file's own rules (core.config): the
    same value refused in config.toml is refused here, with the same sentence."""
    from core.config import (
        ClusterConfig,
        McpServerConfig,
        RemoteEndpoint,
        Sampling,
        Settings,
    )

    for name, cls in (("remotes", RemoteEndpoint), ("mcp_servers", McpServerConfig),
                      ("clusters", ClusterConfig)):
        entries = getattr(settings, name)
        if not isinstance(entries, list) or not all(isinstance(e, cls) for e in entries):
            raise _bad(f"{field}.{name}", f"a list of {cls.__name__}", entries)
    if not isinstance(settings.sampling, Sampling):
        raise _bad(f"{field}.sampling", "a Sampling", settings.sampling)
    for name in ("aliases", "keep_alive"):
        if not isinstance(getattr(settings, name), dict):
            raise _bad(f"{field}.{name}", "an object of names", getattr(settings, name))
    data = {k: v for k, v in dataclasses.asdict(settings).items()
            if v is not None and k != "problems"}
    probe = Settings()
    try:
        probe._apply(data)  # noqa: SLF001 - the file's rules, read as the file is
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise ArgError(BAD_CALL, f"{field}: {exc}.") from None
    if probe.problems:
        raise ArgError(BAD_CALL, f"{field}: {probe.problems[0]}")


# -- the schemas ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Arg:
    """One argument: its check, whether it must be given, whether None may stand for it,
    and what it must name in the store ("conversation", "message") when given."""

    check: Check
    required: bool = False
    nullable: bool = False
    stored: str | None = None


def _req(check: Check, stored: str | None = None) -> Arg:
    return Arg(check, required=True, stored=stored)


def _opt(check: Check, *, nullable: bool = False) -> Arg:
    return Arg(check, nullable=nullable)


_ID = ident()
_PAGE = _opt(whole(1, MAX_PAGE))
_CONV = _req(_ID)  # reading: a conversation that is gone gives an empty answer
_LIVE_CONV = _req(_ID, "conversation")  # writing: it must be there
_NEW_OR_LIVE_CONV = Arg(_ID, required=True, nullable=True, stored="conversation")
_ANY_CONV = Arg(_ID, required=True, nullable=True)
_NAME = _req(text(MAX_NAME_CHARS))
_BODY = _req(text())  # a message: the frame's own limit bounds it

CALLS: dict[str, dict[str, Arg]] = {
    # conversations and messages
    "list_conversations": {"limit": _PAGE},
    "conversation": {"conversation_id": _CONV},
    "messages": {"conversation_id": _CONV, "limit": _PAGE, "before": _opt(_ID, nullable=True)},
    "messages_around": {"conversation_id": _CONV, "message_id": _req(_ID), "limit": _PAGE},
    "messages_after": {"conversation_id": _CONV, "after": _req(_ID), "limit": _PAGE},
    "search": {"query": _req(text(MAX_NAME_CHARS)), "limit": _PAGE},
    "branch_positions": {"message_ids": _req(list_of(_ID, MAX_LIST))},
    "step_branch": {"message_id": _req(_ID), "step": _req(one_of(-1, 1))},
    "delete_message": {"message_id": _req(_ID)},
    "rename_conversation": {"conversation_id": _LIVE_CONV, "title": _NAME},
    "delete_conversation": {"conversation_id": _CONV},
    "export_conversation": {"conversation_id": _LIVE_CONV, "folder": _opt(path(absolute=True), nullable=True)},
    "remember_model": {"conversation_id": _CONV},
    # the model
    "ensure_model": {},
    "reload_model": {},
    "switch_model": {"path": _req(text(MAX_NAME_CHARS, empty=False)),
                     "engine": _opt(text(64), nullable=True), "bundled": _opt(one_of(True, False))},
    "spec_for": {"path": _req(text(MAX_NAME_CHARS, empty=False)),
                 "engine": _opt(text(64), nullable=True),
                 "context_size": _opt(whole(1, MAX_CONTEXT), nullable=True),
                 "bundled": _opt(one_of(True, False))},
    "apply_preset": {"model": _opt(text(MAX_NAME_CHARS), nullable=True),
                     "label": _opt(text(MAX_NAME_CHARS), nullable=True)},
    "save_preset": {},
    # the model hub
    "hub_search": {"query": _req(text(MAX_NAME_CHARS)), "fmt": _opt(one_of("all", "gguf", "mlx")),
                   "sort": _opt(one_of("downloads", "likes", "recent"))},
    "hub_files": {"repo_id": _req(text(MAX_NAME_CHARS, empty=False))},
    "hub_offline": {},
    "recommended_models": {"context_size": _opt(whole(1, MAX_CONTEXT), nullable=True)},
    "delete_local_model": {"model_id": _req(text(MAX_NAME_CHARS, empty=False))},
    "find_model": {"ref": _req(text(MAX_NAME_CHARS, empty=False))},
    "local_models": {},
    "model_ref": {},
    "is_active_model": {"ref": _NAME},
    "worker_status": {},
    "model_is_remote": {},
    # documents and images
    "attachments": {"conversation_id": _ANY_CONV},
    "detach": {"conversation_id": _CONV, "alias": _NAME},
    "images": {"conversation_id": _ANY_CONV},
    "check_mentions": {"conversation_id": _ANY_CONV, "text": _BODY},
    "attach": {"conversation_id": _NEW_OR_LIVE_CONV, "paths": _req(list_of(path(), MAX_PATHS))},
    # tools
    "run_python": {"conversation_id": _LIVE_CONV, "code": _BODY},
    "tool_warning": {"name": _NAME},
    "can_always_allow": {"name": _NAME},
    "sandbox_info": {},
    "mcp_prompt_commands": {},
    "mcp_resources": {},
    "mcp_prompt": {"command": _NAME, "argument": _BODY},
    "mcp_save_resource": {"server": _NAME, "uri": _NAME},
    # replies
    "start_turn": {"conversation_id": _NEW_OR_LIVE_CONV, "text": _BODY},
    "regenerate": {"conversation_id": _LIVE_CONV, "message_id": _req(_ID, "message")},
    "edit_and_resend": {"conversation_id": _LIVE_CONV, "message_id": _req(_ID, "message"),
                        "text": _BODY},
    "continue_reply": {"conversation_id": _LIVE_CONV, "message_id": _req(_ID, "message")},
    "watch_turn": {"turn": _opt(_ID), "conversation_id": _opt(_ID)},
    "cancel_turn": {"turn": _req(_ID)},
    "cancel_call": {"call": _req(call_id())},
    "answer_approval": {"ask": _req(_ID), "decision": _req(one_of("allow", "deny", "always"))},
    "live_turns": {},
    "compare": {"conversation_id": _NEW_OR_LIVE_CONV, "text": _BODY,
                "other": _req(instance("ModelSpec", _model_spec)), "label": _NAME},
    "compare_cancel": {"compare": _req(_ID)},
    "compare_keep": {"compare": _req(_ID), "side": _req(one_of(0, 1))},
    # the service
    "status": {},
    "subscribe": {"topic": _req(one_of(*SUBSCRIPTION_TOPICS))},
    "unsubscribe": {"topic": _req(one_of(*SUBSCRIPTION_TOPICS))},
    "model_state": {},
    "mirror": {},
    "mcp_start": {},
    "get_settings": {},
    "save_settings": {"settings": _req(instance("Settings", _settings))},
    "shutdown": {"restart": _opt(one_of(True, False))},
    "serve_open": {"host": _opt(text(255), nullable=True),
                   "port": _opt(whole(0, 65535), nullable=True),
                   "api_key": _opt(text(4096), nullable=True),
                   "max_queue": _opt(whole(1, 1_000_000), nullable=True),
                   "served_name": _opt(text(MAX_NAME_CHARS), nullable=True),
                   "max_connections": _opt(whole(1, 1_000_000), nullable=True),
                   "idle_timeout": _opt(seconds(zero=False), nullable=True),
                   "load_wait": _opt(seconds(zero=True), nullable=True),
                   "request_log": _opt(one_of(True, False))},
    "serve_close": {},
    # downloads (core.service.downloads checks the names' shape again)
    "download_start": {"repo": _req(text(MAX_NAME_CHARS, empty=False)),
                       "file": _opt(text(MAX_NAME_CHARS), nullable=True),
                       "revision": _opt(text(MAX_NAME_CHARS), nullable=True),
                       "load": _opt(one_of(True, False)),
                       "include_mmproj": _opt(one_of(True, False))},
    "download_cancel": {"job": _req(text(MAX_NAME_CHARS, empty=False))},
    "downloads": {},
}


def check(name: str, args: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Check `args` against call `name`'s schema (ArgError when they break it); returns
    the (field, kind, id) of each stored thing they name, for `check_stored`."""
    schema = CALLS.get(name)
    if schema is None:
        raise ArgError(BAD_CALL, f"There is no call named {name[:80]!r}.")
    unknown = sorted(set(args) - set(schema))
    if unknown:
        known = ", ".join(schema) or "none"
        raise ArgError(BAD_CALL, f"{name}: there is no argument {unknown[0][:60]!r} "
                       f"(its arguments: {known}).")
    stored: list[tuple[str, str, Any]] = []
    for field, arg in schema.items():
        if field not in args:
            if arg.required:
                raise ArgError(BAD_CALL, f"{name}: {field} is missing.")
            continue
        value = args[field]
        if value is None:
            if not arg.nullable:
                raise ArgError(BAD_CALL, f"{name}: {field} must not be null.")
            continue
        try:
            checked = arg.check(field, value)
        except ArgError as exc:
            raise ArgError(exc.code, f"{name}: {exc.message}") from None
        if checked is not None:
            args[field] = value = checked
        if arg.stored is not None:
            stored.append((field, arg.stored, value))
    return stored


async def check_stored(runtime: Any, name: str, wanted: list[tuple[str, str, Any]]) -> None:
    """NOT_FOUND naming the field when an id names nothing in the store (one trip to the
    store thread for all of them); a message must belong to the call's conversation."""
    if not wanted:
        return
    store = runtime.store_handle

    def look() -> str | None:
        conversation = None
        for field, kind, value in wanted:
            if kind == "conversation":
                if store.get_conversation(value) is None:
                    return f"{name}: {field} {value[:40]!r} names no conversation (deleted?)."
                conversation = value
        for field, kind, value in wanted:
            if kind == "message":
                message = store.get_message(value)
                if message is None:
                    return f"{name}: {field} {value[:40]!r} names no message (deleted?)."
                if conversation is not None and message.conversation_id != conversation:
                    return f"{name}: {field} {value[:40]!r} is not a message of that conversation."
        return None

    problem = await runtime.store_call(look)
    if problem is not None:
        raise ArgError(NOT_FOUND, problem)
