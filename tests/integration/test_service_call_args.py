"""Every call of the service's socket walked with hostile arguments, through the real
door (a raw socket on a real service): wrong types, missing and unknown arguments, odd
numbers, text that is not text, ids that name nothing. Each is answered BAD_CALL or
NOT_FOUND with a sentence naming the field (issue 44 item 1), never the generic FAILED
"could not do that (TypeError)"; the service and its data outlive the walk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.service import call_args
from core.service.dispatch import RUNTIME_CALLS, SERVICE_CALLS, TURN_CALLS
from tests.helpers import service_proc as svc

MISSING_ID = "0" * 32
HOSTILE: list[Any] = [None, True, -1, 0, 2**70, 1.5, float("nan"), float("inf"), "",
                      "x" * 100_000, "\ud800 lone", [], [1, None], {}, {"$tuple": [1]},
                      {"$type": "TextDelta", "text": "x"}, MISSING_ID]
BAD_SETTINGS = [{"$type": "Settings", "context_size": "big"},
                {"$type": "Settings", "sampling": {"temperature": 1}},
                {"$type": "Settings", "remotes": [1]},
                {"$type": "Settings", "sampling": {"$type": "Sampling", "top_k": -5}}]
GENERIC = "could not do that ("


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


class Door:
    """A raw client: one call at a time, events in between skipped."""

    def __init__(self) -> None:
        self.sock = svc.raw_client()
        self.n = 0

    def call(self, name: str, args: Any) -> dict[str, Any]:
        self.n += 1
        line = json.dumps({"id": self.n, "call": name, "args": args}).encode() + b"\n"
        self.sock.sendall(line)
        while True:
            raw = svc.read_line(self.sock)
            assert raw, f"the service hung up on {name}({str(args)[:200]})"
            message = json.loads(raw)
            if message.get("id") == self.n:
                return message


def _baselines(cid: str, mid: str) -> dict[str, dict[str, Any]]:
    """Arguments that pass each call's schema, the others' values while one is attacked
    (nothing here runs a model, writes outside the home or stops the service)."""
    ids = {"conversation_id": cid, "message_id": mid, "before": mid, "after": mid,
           "turn": MISSING_ID, "ask": MISSING_ID, "compare": MISSING_ID}
    values = {"limit": 5, "query": "hello", "message_ids": [mid], "step": 1, "title": "T",
              "folder": None, "path": "/nonexistent/model.gguf", "engine": None,
              "ref": "nothing", "alias": "nothing", "text": "hi", "paths": [],
              "code": "print(1)", "name": "python", "command": "/none.x", "argument": "",
              "server": "none", "uri": "notes://x", "decision": "deny", "side": 0,
              "topic": "status", "label": "other", "call": 999_999, "repo": "none/none", "job": "0",
              "repo_id": "none/none", "model_id": "none",  # the hub's (offline in tests)
              "other": {"$type": "ModelSpec", "path": "/nonexistent/other.gguf",
                        "engine": "llamacpp"},
              "settings": None}
    out = {}
    for name, schema in call_args.CALLS.items():
        out[name] = {f: {**values, **ids}[f] for f, a in schema.items() if a.required}
    return out


def _verdict(name: str, args: Any, answer: dict[str, Any]) -> str | None:
    """What is wrong with the answer, or None."""
    error = answer.get("error")
    if error is None:
        return None
    code, message = error.get("code"), str(error.get("message"))
    if code in ("BAD_CALL", "NOT_FOUND"):
        return None if message and len(message) < 600 else f"{name}: a bad sentence {message[:100]!r}"
    if code == "FAILED" and GENERIC not in message:
        return None  # the call ran and failed, with its own sentence (a model not found...)
    return f"{name}({json.dumps(args)[:160]}) -> {code}: {message[:160]}"


def test_the_schema_table_names_every_call_and_the_runtime_parameters() -> None:
    import inspect

    from core.runtime import Runtime

    calls = set(RUNTIME_CALLS) | set(TURN_CALLS) | set(SERVICE_CALLS)
    assert set(call_args.CALLS) == calls
    for name in set(RUNTIME_CALLS) | set(TURN_CALLS):
        params = [p for p in inspect.signature(getattr(Runtime, name)).parameters if p != "self"]
        assert set(call_args.CALLS[name]) == set(params) - {"progress"}, name


def test_every_call_with_hostile_arguments_is_refused_naming_the_field(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(reply="Stored."), "--no-preload")
    door = Door()
    started = door.call("start_turn", {"conversation_id": None, "text": "keep me"})
    cid = started["result"]["conversation_id"]
    svc.wait_for(lambda: len(door.call("messages", {"conversation_id": cid})["result"]) == 2,
                 60, "the first reply stored")
    mid = door.call("messages", {"conversation_id": cid})["result"][0]["id"]
    baselines = _baselines(cid, mid)
    wrong: list[str] = []
    walked = 0
    for name in call_args.CALLS:  # shutdown's every attack is refused: it never runs
        base = baselines[name]
        attacks: list[Any] = [{**base, "surplus": 1}]
        attacks += [{k: v for k, v in base.items() if k != field} for field in base]
        for field in call_args.CALLS[name]:
            values = HOSTILE + (BAD_SETTINGS if field == "settings" else [])
            if name == "shutdown":  # true/false are its restart flag's values: it would stop
                values = [v for v in values if not isinstance(v, bool)]
            attacks += [{**base, field: value} for value in values]
        attacks += [[], "args", 7]  # args that are not an object (null means none: {})
        if name != "shutdown":
            attacks.append(None)
        for args in attacks:
            answer = door.call(name, args)
            walked += 1
            if name == "serve_open" and "result" in answer:
                door.call("serve_close", {})  # a hostile value that is a fine port (0)
            if (problem := _verdict(name, args, answer)) is not None:
                wrong.append(problem)
    assert walked > 800
    assert not wrong, f"{len(wrong)} of {walked} answers leaked an exception:\n" + "\n".join(wrong[:40])
    assert svc.alive(pid)
    # The conversation the walk aimed at is whole (edits with valid text made branches).
    page = door.call("messages_around", {"conversation_id": cid, "message_id": mid})["result"]
    assert [m["content"] for m in page["$tuple"][0]][:1] == ["keep me"]


def test_the_answers_name_the_field(llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(), "--no-preload")
    door = Door()
    cases = [
        ("messages", {"conversation_id": 7}, "BAD_CALL", "conversation_id"),
        ("messages", {"conversation_id": "c", "limit": -1}, "BAD_CALL", "limit"),
        ("list_conversations", {"limit": 2**70}, "BAD_CALL", "limit"),
        ("search", {"query": "\ud800"}, "BAD_CALL", "query"),
        ("start_turn", {"text": "hi"}, "BAD_CALL", "conversation_id is missing"),
        ("start_turn", {"conversation_id": MISSING_ID, "text": "hi"}, "NOT_FOUND", "conversation_id"),
        ("regenerate", {"conversation_id": MISSING_ID, "message_id": MISSING_ID}, "NOT_FOUND",
         "conversation_id"),
        ("step_branch", {"message_id": "m", "step": 5}, "BAD_CALL", "step"),
        ("step_branch", {"message_id": "m", "step": 1.0}, "BAD_CALL", "step"),
        ("compare_keep", {"compare": "c", "side": 1.0}, "BAD_CALL", "side"),
        ("status", {"surplus": 1}, "BAD_CALL", "'surplus'"),
        ("serve_open", {"port": 70000}, "BAD_CALL", "port"),
    ]
    for name, args, code, named in cases:
        error = door.call(name, args).get("error") or {}
        assert error.get("code") == code and named in error.get("message", ""), (name, error)


def test_a_planted_id_never_reaches_the_store_as_a_write(llmdeck_home: Path) -> None:
    """Writing calls aimed at ids that name nothing change nothing and say so."""
    svc.start(*svc.scripted_args(), "--no-preload")
    door = Door()
    before = door.call("list_conversations", {})["result"]
    for name, args in (("edit_and_resend", {"conversation_id": MISSING_ID, "message_id": MISSING_ID,
                                            "text": "x"}),
                       ("rename_conversation", {"conversation_id": MISSING_ID, "title": "x"}),
                       ("run_python", {"conversation_id": MISSING_ID, "code": "print(1)"})):
        assert door.call(name, args)["error"]["code"] == "NOT_FOUND", name
    assert door.call("list_conversations", {})["result"] == before

