"""`llmdeck serve` under hostile input: every refusal is OpenAI-shaped JSON with the right
status, bounds are checked before any work, and nothing a client sends crashes a worker.

Against a real server over real HTTP: raw sockets where the input is malformed, the
official openai client for everything a normal program sends. The worker is a real
process running the scripted engine (fast and exact); test_serve_llamacpp_hostile.py
does the same with the bundled Gemma on llama.cpp.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

import httpx2 as httpx
import openai
import pytest
from openai import OpenAI

from core.server import ServerHandle
from core.server.connections import ServeLimits
from tests.fixtures.serve import ServerThread, scripted_spec, served
from tests.helpers.http_raw import closed_within, exchange, post_bytes, read_reply

HI = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    home = tmp_path_factory.mktemp("serve-hostile-home")
    runs = home / "runs.jsonl"  # one line per generation the worker ran
    for srv in served(scripted_spec(reply="Fine.", emit_log=str(runs)), home,
                      limits=ServeLimits(idle_timeout_s=1.0, body_timeout_s=1.0)):
        srv.runs = runs  # type: ignore[attr-defined]
        yield srv


def post(server: ServerThread, body: bytes | str, **kw: object) -> object:
    data = body.encode() if isinstance(body, str) else body
    return exchange(server.handle.host, server.handle.port, post_bytes(CHAT, data, **kw))  # type: ignore[arg-type]


def assert_api_error(reply: object, status: int, *words: str) -> dict:
    assert reply.status == status, (reply.status, reply.body[:300])  # type: ignore[attr-defined]
    assert "application/json" in reply.head.lower()  # type: ignore[attr-defined]
    err = reply.json()["error"]  # type: ignore[attr-defined]
    assert set(err) == {"message", "type", "param", "code"}
    for word in words:
        assert word in err["message"], err["message"]
    return err


def generations(server: ServerThread) -> int:
    runs = server.runs  # type: ignore[attr-defined]
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def worker_pid(server: ServerThread) -> int:
    [pid] = server.runtime.pool.pids()
    return pid


# -- bodies that are not what they claim --------------------------------------------------


def test_tool_calls_that_are_not_a_list_are_a_400_naming_the_field(server: ServerThread) -> None:
    body = json.dumps({"model": "scripted", "messages": [
        {"role": "assistant", "content": "x", "tool_calls": 5}, *HI]})
    err = assert_api_error(post(server, body), 400, "tool_calls must be a list")
    assert err["param"] == "messages[0].tool_calls"


@pytest.mark.parametrize("depth", [65, 5_000, 200_000])
def test_deeply_nested_json_is_a_400_not_a_500(server: ServerThread, depth: int) -> None:
    body = '{"model": "scripted", "messages": ' + "[" * depth + "]" * depth + "}"
    assert_api_error(post(server, body), 400, "nested more than 64 levels")


def test_nesting_within_the_bound_is_accepted(server: ServerThread) -> None:
    deep: object = "leaf"
    for _ in range(40):
        deep = {"a": deep}
    tool = {"type": "function", "function": {"name": "f", "parameters": deep}}
    reply = OpenAI(base_url=server.url, api_key="x", max_retries=0).chat.completions.create(
        model="scripted", messages=HI, tools=[tool])
    assert reply.choices[0].message.content == "Fine."


def test_tool_call_arguments_nested_deep_inside_their_string_are_served(server: ServerThread) -> None:
    """The body's nesting bound cannot see into a string: history arguments of 5,000
    brackets raised RecursionError in the request parser."""
    args = "[" * 5000 + "]" * 5000
    history = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    reply = OpenAI(base_url=server.url, api_key="x", max_retries=0).chat.completions.create(
        model="scripted", messages=history)
    assert reply.choices[0].message.content == "Fine."


@pytest.mark.parametrize(("raw", "words"), [
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8"),
    (b'{"model": "scripted", "messages": [', "not valid JSON"),
    (b"", "not valid JSON"),
])
def test_bodies_that_are_not_utf8_json_are_400(server: ServerThread, raw: bytes, words: str) -> None:
    assert_api_error(post(server, raw), 400, words)


@pytest.mark.parametrize(("field", "raw", "words"), [
    ("content", '"\\ud800"', "U+D800"),
    ("content", '"ok \\udfff then"', "U+DFFF"),
    ("content", '[{"type": "text", "text": "\\udbff"}]', "U+DBFF"),
    ("name", '"\\ud800"', "U+D800"),
])
def test_lone_surrogates_are_refused_at_the_edge_naming_where(server: ServerThread, field: str,
                                                              raw: str, words: str) -> None:
    pid = worker_pid(server)
    body = '{"model": "scripted", "messages": [{"role": "user", "content": "x", "' + field + '": ' + raw + "}]}"
    body = body.replace('"content": "x", "content"', '"content"')
    err = assert_api_error(post(server, body), 400, words, "surrogate")
    assert err["param"].startswith("messages[0]")
    assert worker_pid(server) == pid


def test_a_surrogate_pair_is_text_and_is_served(server: ServerThread) -> None:
    body = '{"model": "scripted", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    reply = post(server, body)
    assert reply.status == 200 and reply.json()["choices"][0]["message"]["content"] == "Fine."


# -- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "status_words"), [
    ('"repetition_penalty": NaN', "not finite"),
    ('"temperature": Infinity', "not finite"),
    ('"top_p": -Infinity', "not finite"),
    ('"repetition_penalty": 1e999', "not finite"),
    ('"max_tokens": 1e40', "max_tokens"),
    ('"max_tokens": 10000000000000000000000000000000000000000', "at most 2147483647"),
    ('"top_k": 4294967296', "at most 2147483647"),
    ('"seed": -1', "seed"),
    ('"seed": 99999999999999999999999', "seed"),
    ('"max_tokens": "12"', "max_tokens"),
    ('"temperature": true', "temperature"),
])
def test_nan_inf_and_huge_numbers_are_400_before_any_work(server: ServerThread, extra: str,
                                                          status_words: str) -> None:
    before = generations(server)
    body = '{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], ' + extra + "}"
    err = assert_api_error(post(server, body), 400, status_words)
    assert err["type"] == "invalid_request_error"
    ok = '{"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}'
    assert post(server, ok).status == 200
    assert generations(server) == before + 1  # only the valid request reached the worker


# -- size ----------------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_413_naming_its_size(server: ServerThread) -> None:
    size = 40 * 1024 * 1024
    head = post_bytes(CHAT, b"", headers={"Content-Length": str(size)})
    started = time.monotonic()
    reply = exchange(server.handle.host, server.handle.port, head)  # no body sent at all
    err = assert_api_error(reply, 413, f"{size:,} bytes", "33,554,432 bytes")
    assert err["code"] == "request_too_large"
    assert time.monotonic() - started < 2


def test_a_chunked_body_over_the_limit_is_413_too(server: ServerThread) -> None:
    chunk = b"x" * (1024 * 1024)
    framed = b"".join(b"%x\r\n%b\r\n" % (len(chunk), chunk) for _ in range(34)) + b"0\r\n\r\n"
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    reply = exchange(server.handle.host, server.handle.port, head + framed)
    assert_api_error(reply, 413, "33,554,432 bytes")


def test_a_30_mb_prompt_is_refused_without_tokenising(server: ServerThread) -> None:
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "word " * 6_000_000}]})
    started = time.monotonic()
    err = assert_api_error(post(server, body), 400, "are 30,000,0", "characters long", "4,096 tokens")
    assert err["code"] == "context_length_exceeded"
    assert time.monotonic() - started < 5  # llama.cpp took 34 s to tokenise it before the 400


# -- headers ---------------------------------------------------------------------------------


def test_a_non_utf8_authorization_header_is_a_401_in_json(server: ServerThread) -> None:
    handle: ServerHandle = server.call(ServerHandle.start(server.runtime, "127.0.0.1", 0, api_key="k3y"))
    try:
        body = json.dumps({"model": "scripted", "messages": HI}).encode()
        data = post_bytes(CHAT, body, extra_head=b"Authorization: Bearer \xff\xfe\x80k3y\r\n")
        assert_api_error(exchange(handle.host, handle.port, data), 401, "API key")
        good = post_bytes(CHAT, body, headers={"Authorization": "Bearer k3y"})
        assert exchange(handle.host, handle.port, good).status == 200
    finally:
        server.call(handle.stop())


def test_http_that_does_not_parse_gets_json_and_no_traceback(server: ServerThread,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    for junk in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to an HTTP port
                 b"GET / HTTP/1.1\r\nHost x\r\n\r\n",  # header without a colon
                 b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n"):
        reply = exchange(server.handle.host, server.handle.port, junk)
        assert_api_error(reply, 400, "not valid HTTP")
    assert not [r for r in caplog.records if r.exc_info], "malformed HTTP must not log tracebacks"


# -- connections -------------------------------------------------------------------------------


def test_an_idle_connection_and_a_slow_header_are_closed(server: ServerThread) -> None:
    host, port = server.handle.host, server.handle.port
    with socket.create_connection((host, port)) as idle, socket.create_connection((host, port)) as slow:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert (closed_within(idle, 5) or 99) < 3
        assert (closed_within(slow, 5) or 99) < 3


def test_a_body_that_never_arrives_is_408_after_the_body_timeout(server: ServerThread) -> None:
    head = post_bytes(CHAT, b"", headers={"Content-Length": "100"}) + b'{"model": '
    started = time.monotonic()
    with socket.create_connection((server.handle.host, server.handle.port), timeout=10) as sock:
        sock.sendall(head)
        reply = read_reply(sock)
    assert_api_error(reply, 408, "did not arrive within 1 s")
    assert time.monotonic() - started < 4


def test_a_client_that_hangs_up_cancels_its_generation_within_a_second(tmp_path: object) -> None:
    srv = ServerThread(scripted_spec(tokens_per_s=20, reply="slow " * 400))
    try:
        for stream in (False, True):
            body = json.dumps({"model": "scripted", "messages": HI, "stream": stream}).encode()
            sock = socket.create_connection((srv.handle.host, srv.handle.port))
            sock.sendall(post_bytes(CHAT, body))
            deadline = time.monotonic() + 10
            while srv.runtime.worker_status()[0].active == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert srv.runtime.worker_status()[0].active == 1
            time.sleep(0.3)  # generating
            sock.close()
            left = time.monotonic()
            while srv.runtime.worker_status()[0].active and time.monotonic() - left < 5:
                time.sleep(0.01)
            # 400 tokens at 20/s would go on for 20 s; 2.5 s leaves room for a loaded box
            assert time.monotonic() - left < 2.5, f"stream={stream}: still generating after the client left"
    finally:
        srv.close()


def test_at_the_connection_cap_idle_connections_make_room_and_busy_ones_refuse(tmp_path: object) -> None:
    srv = ServerThread(scripted_spec(tokens_per_s=20, reply="slow " * 100),
                       limits=ServeLimits(max_connections=4, idle_timeout_s=60))
    host, port = srv.handle.host, srv.handle.port
    try:
        idle = [socket.create_connection((host, port)) for _ in range(4)]
        # a fifth (a real client) gets served: the oldest idle connection makes room
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        assert client.chat.completions.create(model="scripted", messages=HI, max_tokens=2).choices
        assert closed_within(idle[0], 2) is not None
        assert srv.handle.guard is not None and srv.handle.guard.evicted >= 1
        for sock in idle:
            sock.close()
        # four busy streams fill the cap: the next connection is told so, in JSON, and closed
        body = json.dumps({"model": "scripted", "messages": HI, "stream": True}).encode()
        busy = [socket.create_connection((host, port)) for _ in range(4)]
        for sock in busy:
            sock.sendall(post_bytes(CHAT, body))
        deadline = time.monotonic() + 10
        while srv.runtime.worker_status()[0].active < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        reply = exchange(host, port, post_bytes(CHAT, body), timeout=5)
        assert_api_error(reply, 503, "too many open connections")
        for sock in busy:
            sock.close()
        deadline = time.monotonic() + 5
        while srv.runtime.worker_status()[0].active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.chat.completions.create(model="scripted", messages=HI, max_tokens=2).choices
    finally:
        srv.close()


# -- crashes -------------------------------------------------------------------------------------


def test_a_request_that_crashes_the_worker_fails_alone_and_cannot_spend_the_budget(tmp_path: object) -> None:
    srv = ServerThread(scripted_spec(reply="Fine.", crash_on="CRASH"))
    srv.runtime.pool.max_restarts = 1
    client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
    health = srv.url.removesuffix("/v1") + "/health"
    bad = [{"role": "user", "content": "please CRASH now"}]
    try:
        for attempt in range(2):
            with pytest.raises(openai.InternalServerError) as info:
                client.chat.completions.create(model="scripted", messages=bad)
            message = info.value.message
            assert info.value.status_code == 500 and info.value.body["code"] == "worker_crashed"
            assert "crashed (SIGSEGV) while generating this request" in message
            assert "retry the request" in message
            assert "reply so far" not in message and "exit code 0" not in message
            # the worker comes back; meanwhile /health says so and requests wait for it
            reply = client.chat.completions.create(model="scripted", messages=HI)
            assert reply.choices[0].message.content == "Fine.", attempt
        # pinned on this request twice: refused without reaching a worker
        pid = worker_pid(srv)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="scripted", messages=bad)
        assert "crashed the model worker twice" in info.value.message
        assert worker_pid(srv) == pid
        state = httpx.get(health).json()
        assert state["status"] == "ready" and state["workers"][0]["restarts"] == 2
        assert srv.runtime.pool.crash_failure("chat") is None  # budget of 1 untouched
    finally:
        srv.close()


def test_health_says_failed_once_the_restart_budget_is_spent(tmp_path: object) -> None:
    import signal

    srv = ServerThread(scripted_spec(reply="Fine."))
    srv.runtime.pool.max_restarts = 1
    health = srv.url.removesuffix("/v1") + "/health"
    try:
        assert httpx.get(health).status_code == 200
        for _ in range(2):  # crashes with nothing in flight: the model's own fault
            pid = worker_pid(srv)
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                state = httpx.get(health).json()
                pids = srv.runtime.pool.pids()
                if state["status"] == "failed" or (pids and pids != [pid] and state["status"] == "ready"):
                    break
                time.sleep(0.05)
        reply = httpx.get(health)
        assert reply.status_code == 503 and reply.json()["status"] == "failed"
        assert "crashed 2 times" in reply.json()["error"]
        with pytest.raises(openai.InternalServerError) as info:
            OpenAI(base_url=srv.url, api_key="x", max_retries=0).chat.completions.create(
                model="scripted", messages=HI)
        assert info.value.status_code == 503 and "crashed 2 times" in info.value.message
    finally:
        srv.close()


def test_a_load_longer_than_the_wait_is_a_503_naming_the_wait(tmp_path: object) -> None:
    srv = ServerThread(scripted_spec(hang_load_s=4), wait_ready=False,
                       limits=ServeLimits(load_wait_s=1.0))
    try:
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as info:
            OpenAI(base_url=srv.url, api_key="x", max_retries=0).chat.completions.create(
                model="scripted", messages=HI)
        assert info.value.status_code == 503 and "still loading after 1 s" in info.value.message
        assert 0.9 < time.monotonic() - started < 3
        assert httpx.get(srv.url.removesuffix("/v1") + "/health").json()["status"] == "loading"
    finally:
        srv.close()


def test_a_streaming_client_that_stops_reading_is_dropped_after_the_write_timeout(tmp_path: object) -> None:
    # 1,000 pieces of 16 KB at 100 a second: 10 s to send all, unless the client is dropped
    srv = ServerThread(scripted_spec(reply="x" * 16_384_000, chunk_chars=16_384, tokens_per_s=100),
                       limits=ServeLimits(write_timeout_s=1.0))
    try:
        body = json.dumps({"model": "scripted", "messages": HI, "stream": True,
                           "max_tokens": 100_000}).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
        sock.connect((srv.handle.host, srv.handle.port))
        sock.sendall(post_bytes(CHAT, body))  # and never reads
        deadline = time.monotonic() + 10
        while srv.runtime.worker_status()[0].active == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.runtime.worker_status()[0].active == 1
        started = time.monotonic()
        while srv.runtime.worker_status()[0].active and time.monotonic() - started < 9:
            time.sleep(0.05)
        assert srv.runtime.worker_status()[0].active == 0, "a client that reads nothing must be dropped"
        sock.close()
        reply = OpenAI(base_url=srv.url, api_key="x", max_retries=0).chat.completions.create(
            model="scripted", messages=HI, max_tokens=1)
        assert reply.choices[0].message.content == "x" * 16_384
    finally:
        srv.close()
