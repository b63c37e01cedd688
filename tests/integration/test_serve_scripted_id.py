"""`llmdeck serve --engine scripted` answers its one id, `scripted:latest`, under either
name a client may send (issue 45: an id listed once stays servable), and its request log
line names that id whatever name the request used.

The pool listed the model as `scripted:latest` (/v1/models, /api/tags) while a chat
naming plain `scripted` got 404 from the OpenAI face; and the log line echoed the name
the request sent rather than the model's id.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.engines.base import ModelSpec
from tests.fixtures.serve import ServerThread, spawn_serve

ID = "scripted:latest"


@pytest.fixture
def server(llmdeck_home: object) -> Iterator[tuple[ServerThread, list[str]]]:
    srv = ServerThread(ModelSpec("scripted", "scripted", 4096))  # as `--engine scripted`
    lines: list[str] = []
    srv.handle.server.request_log = lines.append
    yield srv, lines
    srv.close()


def _post(srv: ServerThread, path: str, body: dict) -> int:
    request = urllib.request.Request(srv.url.removesuffix("/v1") + path,
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def _get(srv: ServerThread, path: str) -> dict:
    with urllib.request.urlopen(srv.url.removesuffix("/v1") + path, timeout=30) as r:
        return json.loads(r.read())


def test_either_name_reaches_the_one_id_and_the_log_names_the_id(
        server: tuple[ServerThread, list[str]]) -> None:
    srv, lines = server
    ours = [m["id"] for m in _get(srv, "/v1/models")["data"] if m.get("loaded") is True]
    assert ours == [ID]
    assert ID in [m["name"] for m in _get(srv, "/api/tags")["models"]]
    hi = [{"role": "user", "content": "Hi"}]
    routes = [("/v1/chat/completions", {"messages": hi}),
              ("/api/chat", {"messages": hi, "stream": False}),
              ("/v1/messages", {"messages": hi, "max_tokens": 8}),
              ("/v1/completions", {"prompt": "Hi", "max_tokens": 8}),
              ("/v1/responses", {"input": "Hi"}),
              ("/api/generate", {"prompt": "Hi", "stream": False})]
    for name in ("scripted", ID):
        for path, body in routes:
            assert _post(srv, path, {"model": name, **body}) == 200, (name, path)
    chats = [line for line in lines if line.startswith("POST ")]
    assert len(chats) == 2 * len(routes)
    assert all(f" {ID} 200 " in line for line in chats), chats


def test_the_standalone_serve_lists_the_pools_id(llmdeck_home: Path) -> None:
    """`llmdeck serve --standalone --engine scripted` (the server in its own process) listed
    and answered the model as `scripted`, its path, while the pool called it
    `scripted:latest`; now both say the id, and `scripted` still reaches it."""
    proc, url = spawn_serve(llmdeck_home, "--engine", "scripted", ready=False)
    try:
        assert proc.stdout is not None
        ready = next(line for line in proc.stdout if "ready" in line or "failed" in line)
        assert re.search(r"model 'scripted:latest' ready", ready), ready
        with urllib.request.urlopen(url + "/models", timeout=30) as r:
            ours = [m["id"] for m in json.loads(r.read())["data"] if m.get("loaded") is True]
        assert ours == [ID]
        with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=30) as r:
            assert json.loads(r.read())["model"] == ID
        body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "Hi"}]})
        request = urllib.request.Request(url + "/chat/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(30)
