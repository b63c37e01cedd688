"""The service's messages, one JSON object per line (core.service.framing).

    client -> service   {"hello": {"protocol": 1, "client": "tui"}}            first line
    service -> client   {"hello": {"protocol": 1, "version": "0.4.0", "pid": 123}}
    client -> service   {"id": 7, "call": "list_conversations", "args": {"limit": 50}}
    service -> client   {"id": 7, "result": <value>}
                        {"id": 7, "error": {"code": "BAD_CALL", "message": "..."}}
    service -> client   {"event": "turn", "turn": "t1", "seq": 3, "data": <value>}
                        {"event": "turn_end", "turn": "t1", "assistant_message_id": "..."}
                        {"event": "approve", "turn": "t1", "ask": "a1", "data": <ToolCall>,
                         "warning": null}
                        {"event": "status", "data": {...}}   (after subscribe "status")
                        {"event": "model", "data": <ModelState>}
                        {"event": "turn_started", "data": {turn, conversation_id, ...}}
                                              (after subscribe "turns"; not to its starter)
                        {"event": "notice", "data": {kind, title, severity, message}}
                                              (after subscribe "notices"; core.service.notices)
                        {"event": "conversations"}   (after subscribe "conversations": one
                                              was made, renamed, deleted or written to)
                        {"event": "closing", "message": "...", "restart": false}
                                              (the service is stopping; restart: a new one
                                              follows, `llmdeck service restart`)
    a failed call       {"id": 7, "error": {"code": "FAILED", "message": "...",
                         "type": "StoreError", "args": [...], "fields": {...}}}
                                              (core.service.errors: raised again as itself)
    either way          {"error": {"code": "...", "message": "..."}} and the line closes

Values are JSON, with the face's dataclasses as tagged dicts (core.service.codec). A
turn's text events may arrive merged (two TextDelta become one) when a client reads
slower than the model writes; `seq` is then that of the last event merged in.
"""

from __future__ import annotations

from typing import Any

PROTOCOL = 1

# Error codes of a call or of the connection (a sentence comes with each).
BAD_FRAME = "BAD_FRAME"  # not one JSON object per line
TOO_LARGE = "TOO_LARGE"  # a line over the limit, a result over the limit
TIMEOUT = "TIMEOUT"  # a line begun and not ended in time, no hello in time
PROTOCOL_MISMATCH = "PROTOCOL"  # no hello, or another protocol version
NOT_ALLOWED = "NOT_ALLOWED"  # another user
BAD_CALL = "BAD_CALL"  # unknown call, wrong arguments
NOT_FOUND = "NOT_FOUND"  # a turn or message that is not there
FAILED = "FAILED"  # the call ran and raised; the message says why
SLOW_CLIENT = "SLOW_CLIENT"  # its queue overflowed with things that cannot be merged
TOO_MANY = "TOO_MANY"  # the service has as many clients as it takes; this one is refused
STOPPING = "STOPPING"  # the service is on its way out


def hello(client: str) -> dict[str, Any]:
    return {"hello": {"protocol": PROTOCOL, "client": client}}


def error(code: str, message: str, call_id: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": {"code": code, "message": message}}
    if call_id is not None:
        out["id"] = call_id
    return out


def valid_id(value: Any) -> bool:
    """A call id the client picked: a small int or a short string (echoed back as is)."""
    return (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53) or \
        (isinstance(value, str) and 0 < len(value) <= 64)

# What a client may subscribe to: the service's status, the model's state, live replies,
# notices (a database moved aside, a model loaded...), the conversation list's changes,
# downloads, and the chat context's memory stages (a long conversation being summarised,
# an image described: {"event": "memory", "data": {"conversation_id", "stage"}}).
SUBSCRIPTION_TOPICS = ("status", "model", "turns", "notices", "conversations", "downloads",
                       "memory")


class CallError(Exception):
    """A call the client got wrong (code BAD_CALL / NOT_FOUND), with the sentence. Here,
    low, so every handler module can raise it without importing the dispatch table."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
