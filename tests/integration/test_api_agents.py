"""The agents people point at `llmdeck serve`, as shipped (issue 43).

Claude Code's and Codex's first requests were captured from the real clients (npm
`@anthropic-ai/claude-code` 2.1.197, `@openai/codex` 0.171.0, pointed at a capture
server) and are replayed here in their exact JSON shape (long texts trimmed):
tests/fixtures/agent_requests. Before, both were refused with a 400 (a `system` turn
inside `messages`; a `namespace` tool and a hosted `web_search` tool).

A real server on loopback over a real worker running the scripted engine; a second
one whose replies wait seconds before their first token (prefill_s), as a long agent
prompt does, for the streams that must open and keep alive before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from core.server.connections import ServeLimits
from tests.fixtures.serve import (
    ServerThread,
    after_banner,
    scripted_args,
    scripted_spec,
    served,
    spawn_serve,
)

REQUESTS = Path(__file__).resolve().parents[1] / "fixtures" / "agent_requests"
CLOSE_AGENT = ('<think>The user wants it closed.</think>Closing it.'
               '<tool_call>{"name": "close_agent", "arguments": {"target": "a1"}}</tool_call>')
PREFILL_S = 3.0  # the slow server's wait before each reply's first token


def _captured(name: str) -> dict[str, Any]:
    return json.loads((REQUESTS / name).read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(reply=CLOSE_AGENT), tmp_path_factory.mktemp("agents-home"))


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    limits = ServeLimits(stream_open_s=0.05, keepalive_s=0.2)
    yield from served(scripted_spec(reply="Ready now.", prefill_s=PREFILL_S),
                      tmp_path_factory.mktemp("agents-slow-home"), limits=limits)


def _root(server: ServerThread) -> str:
    return server.url.removesuffix("/v1")


def _sse(lines: Iterator[str]) -> list[tuple[str, Any]]:
    """(event name or "", data) of an SSE stream; comments as ("comment", text)."""
    out: list[tuple[str, Any]] = []
    name = ""
    for line in lines:
        if line.startswith(":"):
            out.append(("comment", line[1:].strip()))
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            out.append((name, data if data == "[DONE]" else json.loads(data)))
            name = ""
    return out


# -- Claude Code ---------------------------------------------------------------------


def test_claude_codes_first_request_is_served_streamed(server: ServerThread) -> None:
    captured = _captured("claude_code_first.json")
    body = {**captured["body"], "model": "scripted"}
    assert body["messages"][1]["role"] == "system" and body["max_tokens"] == 32000
    with httpx.stream("POST", _root(server) + "/v1/messages?beta=true", json=body, timeout=60,
                      headers={**captured["headers"], "x-api-key": "unused"}) as reply:
        assert reply.status_code == 200, reply.read()
        events = _sse(reply.iter_lines())
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]["usage"]
    blocks = [data["content_block"]["type"] for kind, data in events
              if kind == "content_block_start"]
    assert blocks == ["thinking", "text", "tool_use"]
    usage = events[-2][1]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert "cache_read_input_tokens" in usage
    # the real count, from the worker before the prefill (it was an estimate: chars / 4)
    assert (start["input_tokens"], start["cache_read_input_tokens"]) == (
        usage["input_tokens"], usage["cache_read_input_tokens"]), (start, usage)


def test_claude_codes_first_request_is_served_whole(server: ServerThread) -> None:
    body = {**_captured("claude_code_first.json")["body"], "model": "scripted", "stream": False}
    reply = httpx.post(_root(server) + "/v1/messages", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    message = reply.json()
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use"]
    assert message["stop_reason"] == "tool_use"
    assert "x-llmdeck-ignored-tools" not in reply.headers  # every tool of Claude Code's is a client's


def test_an_anthropic_server_tool_is_left_out_and_named(server: ServerThread) -> None:
    body = {"model": "scripted", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    reply = httpx.post(_root(server) + "/v1/messages", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-llmdeck-ignored-tools"] == "web_search"


def test_the_root_answers_a_probe(server: ServerThread) -> None:
    """Claude Code sends HEAD / first (and Ollama clients GET /): a 404 read as trouble."""
    assert httpx.head(_root(server) + "/", timeout=10).status_code == 200
    assert "running" in httpx.get(_root(server) + "/", timeout=10).text


# -- Codex ---------------------------------------------------------------------------


def test_codexs_first_request_is_served_with_its_namespaced_call(server: ServerThread) -> None:
    body = {**_captured("codex_first.json")["body"], "model": "scripted"}
    kinds = [t["type"] for t in body["tools"]]
    assert "namespace" in kinds and "web_search" in kinds
    with httpx.stream("POST", server.url + "/responses", json=body, timeout=60,
                      headers={"Authorization": "Bearer unused"}) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["x-llmdeck-ignored-tools"] == "web_search"
        events = _sse(reply.iter_lines())
    kinds = [kind for kind, _ in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    sequence = [data["sequence_number"] for _, data in events]
    assert sequence == list(range(len(events)))
    done = [data["item"] for kind, data in events if kind == "response.output_item.done"]
    call = next(item for item in done if item["type"] == "function_call")
    assert call["name"] == "close_agent" and call["namespace"] == "multi_agent_v1"
    assert json.loads(call["arguments"]) == {"target": "a1"}


def test_codexs_next_turn_sends_the_namespaced_call_back(server: ServerThread) -> None:
    body = {**_captured("codex_first.json")["body"], "model": "scripted", "stream": False}
    body["input"] = [*body["input"],
                     {"type": "function_call", "call_id": "call_1", "name": "close_agent",
                      "namespace": "multi_agent_v1", "arguments": '{"target": "a1"}'},
                     {"type": "function_call_output", "call_id": "call_1", "output": "closed"}]
    reply = httpx.post(server.url + "/responses", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "completed"


# -- streams that open before the first token ------------------------------------------


def _until_text(lines: Iterator[str], has_text: Any) -> list[str]:
    """The lines up to and including the first that carries reply text."""
    seen = []
    for line in lines:
        seen.append(line)
        if has_text(line):
            return seen
    raise AssertionError(f"no text came: {seen}")


@pytest.mark.parametrize(("path", "body", "keepalive", "opening"), [
    ("/v1/messages", {"max_tokens": 50}, "event: ping", "event: message_start"),
    ("/v1/chat/completions", {}, ": keep-alive", '"role":"assistant"'),
    ("/v1/responses", {}, ": keep-alive", "event: response.created"),
    ("/api/chat", {}, '"content":""', '"done":false'),
    ("/v1/completions", {"prompt": "Are you there?"}, ": keep-alive", ": keep-alive"),
])
def test_a_stream_opens_and_keeps_alive_while_the_prompt_is_prefilled(
        slow: ServerThread, path: str, body: dict[str, Any], keepalive: str, opening: str) -> None:
    """Claude Code's watchdog dropped the connection after minutes of silence, then sent
    it all again: bytes must come before the first token, and keep coming."""
    messages = [{"role": "user", "content": "Are you there?"}]
    payload = {"model": "scripted", "stream": True, **body,
               **({"input": "Are you there?"} if path == "/v1/responses"
                  else {} if path == "/v1/completions" else {"messages": messages})}
    sent = time.monotonic()
    with httpx.stream("POST", _root(slow) + path, json=payload, timeout=60) as reply:
        assert reply.status_code == 200
        lines = _until_text(reply.iter_lines(), lambda line: "Read" in line)
    compact = [line.replace(" ", "") if line.startswith("{") else line for line in lines]
    # (Anthropic's message_start waits for the worker's count: pings may come first)
    assert any(opening.replace(" ", "") in line or opening in line for line in compact[:-2]), lines
    pings = sum(keepalive.replace(" ", "") in line.replace(" ", "") for line in lines[:-1])
    assert pings >= 2, lines  # ~PREFILL_S / keepalive_s of them before the first token
    assert time.monotonic() - sent >= PREFILL_S * 0.9  # the text did wait for the "prefill"


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """One request at a time, each with a 1.5 s "prefill": the next one waits its turn."""
    limits = ServeLimits(stream_open_s=0.05, keepalive_s=0.2)
    yield from served(scripted_spec(reply="Ready now.", prefill_s=1.5, max_concurrency=1),
                      tmp_path_factory.mktemp("agents-queued-home"), limits=limits)


@pytest.mark.slow
def test_a_queued_anthropic_stream_opens_with_pings_then_the_real_count(
        one_at_a_time: ServerThread) -> None:
    """A stream that opens before the worker has counted its prompt (it waits behind
    another request) sends pings, then message_start with the real count; before, it
    opened with an estimate (the prompt's characters / 4)."""
    import threading

    ask = [{"role": "user", "content": "Tell me about the weather today, in detail."}]
    first = threading.Thread(target=lambda: httpx.post(
        one_at_a_time.url + "/chat/completions", timeout=60,
        json={"model": "scripted", "messages": ask}))
    first.start()
    try:
        time.sleep(0.3)  # the first request holds the worker
        body = {"model": "scripted", "max_tokens": 50, "stream": True, "messages": ask}
        with httpx.stream("POST", _root(one_at_a_time) + "/v1/messages", json=body,
                          timeout=60) as reply:
            events = _sse(reply.iter_lines())
    finally:
        first.join()
    kinds = [kind for kind, _ in events]
    assert kinds.index("message_start") > kinds.index("ping"), kinds  # pings while queued
    start = events[kinds.index("message_start")][1]["message"]["usage"]
    usage = events[kinds.index("message_delta")][1]["usage"]
    assert start == {**usage, "output_tokens": 0}, (start, usage)


@pytest.fixture(scope="module")
def hushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """As `slow`, with keep-alives too far apart to tell that a client has gone."""
    limits = ServeLimits(stream_open_s=0.05, keepalive_s=30.0)
    yield from served(scripted_spec(reply="Ready now.", prefill_s=PREFILL_S),
                      tmp_path_factory.mktemp("agents-hushed-home"), limits=limits)


@pytest.mark.slow
def test_a_client_gone_is_seen_before_the_next_keep_alive(hushed: ServerThread) -> None:
    """A client that leaves is noticed at once (aiohttp cancels the handler when the
    connection is lost: core.server.handle), not at the next keep-alive's write, 5 s
    apart by default; the request's close then cancels it in the worker."""
    payload = {"model": "scripted", "stream": True, "max_tokens": 50,
               "messages": [{"role": "user", "content": "Never mind."}]}
    with httpx.stream("POST", _root(hushed) + "/v1/messages", json=payload, timeout=60) as reply:
        assert reply.status_code == 200
        next(reply.iter_lines())  # the stream is open: the prompt is being prefilled
        gone = time.monotonic()
    while hushed.handle.server.active and time.monotonic() - gone < PREFILL_S:
        time.sleep(0.02)
    assert time.monotonic() - gone < PREFILL_S / 3, "the request outlived its client"


def test_a_client_gone_during_the_prefill_cancels_it(slow: ServerThread) -> None:
    payload = {"model": "scripted", "stream": True, "max_tokens": 50,
               "messages": [{"role": "user", "content": "Never mind."}]}
    with httpx.stream("POST", _root(slow) + "/v1/messages", json=payload, timeout=60) as reply:
        assert reply.status_code == 200
        next(reply.iter_lines())  # the stream is open: the prompt is being prefilled
        gone = time.monotonic()
    while slow.handle.server.active and time.monotonic() - gone < PREFILL_S * 0.8:
        time.sleep(0.02)
    assert slow.handle.server.active == 0  # the request ended with its client, not its prefill


# -- Ollama --------------------------------------------------------------------------


def test_ollamas_durations_add_up(slow: ServerThread) -> None:
    client = ollama.Client(host=_root(slow), timeout=60)
    reply = client.chat(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert reply.total_duration >= reply.prompt_eval_duration + reply.eval_duration
    assert reply.total_duration >= PREFILL_S * 0.9e9  # from the request's arrival


def test_ollamas_unknown_model_points_at_api_tags(server: ServerThread) -> None:
    client = ollama.Client(host=_root(server), timeout=30)
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="llama9:70b", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404
    assert "/api/tags" in str(caught.value) and "/v1/models" not in str(caught.value)


# -- the serve command's terminal ------------------------------------------------------


def test_serve_prints_each_dialects_url_and_a_line_per_request(tmp_path: Path) -> None:
    proc, url = spawn_serve(tmp_path, *scripted_args(reply="Logged."), ready=False, quiet=False)
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(4)]
        text = "".join(banner)
        assert "OpenAI" in text and url in text
        assert "Anthropic" in text and "Ollama" in text and "API key" in text
        assert "ready" in after_banner(proc.stdout)
        reply = httpx.post(url + "/chat/completions", timeout=30, json={
            "model": "scripted", "messages": [{"role": "user", "content": "secret words"}]})
        assert reply.status_code == 200
        line = proc.stdout.readline()
        assert "POST /v1/chat/completions scripted 200" in line and " tok " in line, line
        assert "secret" not in line  # what was said never reaches the log
    finally:
        proc.terminate()
        proc.wait(10)


# -- a long agent prompt's prefix comes from the cache ------------------------------------


@pytest.fixture(scope="module")
def bundled(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """The bundled model on llama.cpp with two replicas, as a 2-core box runs it; no KV
    cache on disk, which could hand a replica a prefix it never served."""
    from core.config import Settings
    from core.engines.base import ModelSpec

    spec = ModelSpec(str(bundled_gguf), "llamacpp", context_size=2048,
                     options=(("kv_disk_gb", 0),))
    yield from served(spec, tmp_path_factory.mktemp("agents-bundled-home"),
                      settings=Settings(replicas=2), served_name="gemma")


AGENT_PROMPT = " ".join(f"Rule {i}: answer in one short sentence and name no tool." for i in range(40))


@pytest.mark.slow
def test_an_agents_repeated_prefix_comes_from_the_cache(bundled: ServerThread) -> None:
    """Each turn of a session goes to the replica holding its prefix (Codex's
    prompt_cache_key, Claude Code's metadata.user_id), not the least recently used one."""
    root = _root(bundled)
    cached = []
    for question in ("What is 2 + 2?", "What is the capital of France?", "Name a colour."):
        reply = httpx.post(bundled.url + "/responses", timeout=120, json={
            "model": "gemma", "instructions": AGENT_PROMPT, "input": question,
            "max_output_tokens": 8, "prompt_cache_key": "session-1", "store": False})
        assert reply.status_code == 200, reply.text
        usage = reply.json()["usage"]
        cached.append(usage["input_tokens_details"]["cached_tokens"])
        total = usage["input_tokens"]
    assert cached[0] == 0 and min(cached[1:]) > total * 0.8, (cached, total)
    user = json.dumps({"session_id": "claude-1"})
    reads = []
    for question in ("What is 3 + 3?", "What is the capital of Spain?"):
        reply = httpx.post(root + "/v1/messages", timeout=120, json={
            "model": "gemma", "system": AGENT_PROMPT + " Be kind.", "max_tokens": 8,
            "metadata": {"user_id": user}, "messages": [{"role": "user", "content": question}]})
        assert reply.status_code == 200, reply.text
        reads.append(reply.json()["usage"])
    assert reads[1]["cache_read_input_tokens"] > reads[1]["input_tokens"]  # apart, not twice


@pytest.mark.slow
def test_requests_without_a_session_go_to_the_replica_that_served_their_prefix(
        bundled: ServerThread) -> None:
    """Without a session key a request went to the least recently used replica: every
    other turn of an agent landed where none of its prefix was cached (core.workers.
    prefix_route)."""
    cached, total = [], 0
    for question in ("What is 5 + 5?", "Name a fruit.", "What is the capital of Italy?"):
        reply = httpx.post(bundled.url + "/chat/completions", timeout=120, json={
            "model": "gemma", "max_tokens": 4, "messages": [
                {"role": "system", "content": AGENT_PROMPT + " Be brief."},
                {"role": "user", "content": question}]})
        assert reply.status_code == 200, reply.text
        usage = reply.json()["usage"]
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        total = usage["prompt_tokens"]
    assert min(cached[1:]) > total * 0.8, (cached, total)


@pytest.mark.slow
def test_a_hand_written_config_on_a_fresh_home_still_gets_the_bundled_model(
        tmp_path: Path) -> None:
    """The README suggests raising context_size before first use; with only that in
    config.toml, serve said "Model file not found" and /health stayed 503 failed."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("context_size = 8192\n")
    proc, url = spawn_serve(tmp_path, ready=False)
    try:
        assert proc.stdout is not None
        status = after_banner(proc.stdout)
        assert "ready" in status, status
        health = httpx.get(url.removesuffix("/v1") + "/health", timeout=30)
        assert health.status_code == 200 and health.json()["status"] == "ready", health.text
        reply = httpx.post(url + "/chat/completions", timeout=120, json={
            "model": health.json()["model"], "max_tokens": 5,
            "messages": [{"role": "user", "content": "Say hi."}]})
        assert reply.status_code == 200, reply.text
        assert config.read_text() == "context_size = 8192\n"  # left as the person wrote it
        assert not reply.json()["choices"][0]["message"]["content"].endswith("\n")  # 48.8
        listed = httpx.get(url.removesuffix("/v1") + "/api/tags", timeout=30).json()["models"]
        assert [m["name"] for m in listed] == ["gemma3:270m-q4_k_m"]  # one copy, by its id
        assert listed[0]["details"]["parameter_size"] == "270M"  # issue 48.9: they were empty
        assert listed[0]["details"]["quantization_level"] == "Q4_K_M"
    finally:
        proc.terminate()
        proc.wait(10)
