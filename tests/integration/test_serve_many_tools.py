"""Thousands of tools in one request (issue 44 item 4), through the real server: every
dialect refuses more than MAX_TOOLS with its own 400 before any schema is checked; the
schemas of a request within the cap are checked in a worker thread, so a /health sent
meanwhile is answered at once; and the same tools sent again are not checked again."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from core.server import tool_schemas
from core.server.tool_schemas import MAX_TOOLS
from tests.fixtures.serve import ServerThread, scripted_spec, served

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    spec = replace(scripted_spec(reply="Fine."), context_size=65_536)  # room for the tools
    yield from served(spec, tmp_path_factory.mktemp("serve-home"))


def _post(url: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _schema(i: int, width: int = 4) -> dict[str, Any]:
    return {"type": "object", "properties": {
        f"p{i}_{j}": {"type": "string", "description": f"field {j}", "enum": [f"a{j}", f"b{j}"]}
        for j in range(width)}, "required": [f"p{i}_0"]}


def _openai(n: int, width: int = 4) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": f"t{i}", "description": "A tool.",
                                              "parameters": _schema(i, width)}} for i in range(n)]


def test_over_the_cap_every_dialect_refuses_in_its_shape(srv: ServerThread) -> None:
    base = srv.url.removesuffix("/v1")
    n = 5_000
    openai_tools = _openai(n)
    checks_before = tool_schemas.cache.checks
    cases = [
        ("/v1/chat/completions", {"model": "scripted", "messages": HI, "tools": openai_tools}),
        ("/api/chat", {"model": "scripted", "messages": HI, "tools": openai_tools, "stream": False}),
        ("/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": HI, "tools": [
            {"name": f"t{i}", "description": "A tool.", "input_schema": _schema(i)} for i in range(n)]}),
        ("/v1/responses", {"model": "scripted", "input": "hi", "tools": [
            {"type": "function", "name": f"t{i}", "parameters": _schema(i)} for i in range(n)]}),
    ]
    for route, body in cases:
        status, answer = _post(base + route, body)
        assert status == 400, (route, answer)
        text = json.dumps(answer)
        assert f"'tools' lists {n:,} tools" in text and f"at most {MAX_TOOLS}" in text, (route, text)
        if route == "/v1/messages":
            assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
        elif route == "/api/chat":
            assert isinstance(answer["error"], str)  # Ollama's shape: {"error": "..."}
        else:
            assert answer["error"]["param"] == "tools" and answer["error"]["code"] == "too_many_tools"
    assert tool_schemas.cache.checks == checks_before, "no schema was checked"


def test_schemas_are_checked_off_the_loop_and_kept_by_content(srv: ServerThread) -> None:
    base = srv.url.removesuffix("/v1")
    tools = _openai(MAX_TOOLS, width=16)  # distinct, heavy schemas: a second or more to check
    body = {"model": "scripted", "messages": HI, "tools": tools, "max_tokens": 4}
    result: dict[str, Any] = {}

    def big() -> None:
        started = time.monotonic()
        result["status"], _ = _post(srv.url + "/chat/completions", body)
        result["took"] = time.monotonic() - started

    checks_before = tool_schemas.cache.checks
    worker = threading.Thread(target=big)
    worker.start()
    health: list[float] = []
    while worker.is_alive():
        started = time.monotonic()
        with urllib.request.urlopen(base + "/health", timeout=60) as answer:
            answer.read()
        health.append(time.monotonic() - started)
    worker.join()
    assert result["status"] == 200
    assert tool_schemas.cache.checks - checks_before == MAX_TOOLS
    # /health never waited for the schema checks (a loop held by them would make one
    # /health wait about as long as the whole request).
    assert len(health) >= 3 and max(health) < result["took"] / 2, (max(health), result["took"])
    # The same tools again (an agent's next turn): answered from the cache.
    status, _ = _post(srv.url + "/chat/completions", body)
    assert status == 200 and tool_schemas.cache.checks - checks_before == MAX_TOOLS
    # A broken schema is still a 400 naming it, cached or not.
    broken = [*tools[:3], {"type": "function", "function": {"name": "bad", "parameters": {
        "type": "objekt"}}}]
    for _ in range(2):
        status, answer = _post(srv.url + "/chat/completions", {**body, "tools": broken})
        assert status == 400 and answer["error"]["param"] == "tools[3].function.parameters"
        assert "is not a valid JSON schema" in answer["error"]["message"]
