"""1,400 generated hostile requests against `llmdeck serve`: no 5xx, no crash, still serving.

A seeded generator (one seed: a failure names the request that caused it) draws requests
from seven classes: valid bodies with hostile field values, hostile text in every place
text goes, raw bytes that are not UTF-8 JSON, deep nesting, HTTP that does not parse,
odd headers, and unknown routes. They go over raw sockets, 16 at a time, to a real
server whose worker is a real process (scripted engine). Every answer must be below 500
and, when it is an error, OpenAI-shaped JSON; afterwards the worker is the same process,
nothing was logged with a traceback, and the openai client still gets a reply.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from openai import OpenAI

from core.server.connections import ServeLimits
from tests.fixtures.hostile_text import hostile_strings
from tests.fixtures.serve import ServerThread, scripted_spec
from tests.helpers.http_raw import RawReply, exchange, post_bytes

SEED = 20
CHAT = "/v1/chat/completions"
PARAMS = ["model", "messages", "tools", "tool_choice", "stop", "stream", "stream_options",
          "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "max_tokens",
          "max_completion_tokens", "n", "user", "logprobs", "top_logprobs", "response_format",
          "logit_bias", "presence_penalty", "frequency_penalty"]
MESSAGE_FIELDS = ["role", "content", "tool_calls", "tool_call_id", "name"]


class Hostile:
    """The generator: each maker returns the bytes of one request."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.texts = [text for _, text in hostile_strings(400, seed) if len(text) < 4000]

    def text(self) -> str:
        return self.rng.choice(self.texts)

    def value(self, depth: int = 0) -> object:
        r = self.rng
        pool: list[Callable[[], object]] = [
            lambda: None, lambda: r.choice([True, False]), lambda: r.randint(-5, 5),
            lambda: r.choice([2**31, 2**63, 10**40, -(2**70)]),
            lambda: r.choice([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 1e-320]),
            lambda: r.uniform(-1e6, 1e6), self.text, lambda: "",
            lambda: r.choice(["text", "function", "user", "json_object", "none", "auto"]),
        ]
        if depth < 3:
            pool += [lambda: [self.value(depth + 1) for _ in range(r.randint(0, 3))],
                     lambda: {r.choice(PARAMS + MESSAGE_FIELDS + ["type", "function", "text", "name",
                                                                  "arguments", "id"]): self.value(depth + 1)
                              for _ in range(r.randint(0, 3))}]
        return r.choice(pool)()

    def base(self) -> dict:
        return {"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4}

    def json_fields(self) -> bytes:
        body = self.base()
        for _ in range(self.rng.randint(1, 4)):
            if self.rng.random() < 0.6:
                body[self.rng.choice(PARAMS)] = self.value()
            elif isinstance(body.get("messages"), list) and body["messages"] and isinstance(body["messages"][0], dict):
                body["messages"][0][self.rng.choice(MESSAGE_FIELDS)] = self.value()
        return post_bytes(CHAT, json.dumps(body).encode())  # NaN/Infinity written as such

    def hostile_text(self) -> bytes:
        body = self.base()
        where = self.rng.choice(["content", "system", "tool", "stop", "name", "part", "key"])
        t = self.text()
        if where == "content":
            body["messages"][0]["content"] = t
        elif where == "system":
            body["messages"].insert(0, {"role": "system", "content": t})
        elif where == "tool":
            body["tools"] = [{"type": "function", "function": {"name": t, "description": t}}]
        elif where == "stop":
            body["stop"] = [t]
        elif where == "name":
            body["messages"][0]["name"] = t
        elif where == "part":
            body["messages"][0]["content"] = [{"type": "text", "text": t}]
        else:
            body[t] = t
        return post_bytes(CHAT, json.dumps(body).encode())  # lone surrogates as \\udXXX escapes

    def raw_bytes(self) -> bytes:
        r = self.rng
        good = json.dumps(self.base()).encode()
        body = r.choice([
            bytes(r.randrange(256) for _ in range(r.randint(0, 200))),
            good[: r.randint(0, len(good) - 1)],
            good.replace(b'"hi"', b'"\xff\xfe"'), b"\xef\xbb\xbf" + good, good + b"\x00",
            good.replace(b'"hi"', b'"\xed\xa0\x80"'),  # a surrogate encoded as UTF-8 bytes
            b"[" + good + b"]", b"null", b"12", b'"text"', good.replace(b"4", b"NaN"),
        ])
        return post_bytes(CHAT, body)

    def nesting(self) -> bytes:
        depth = self.rng.choice([63, 64, 65, 100, 1000, 10_000, 100_000])
        opener, closer = self.rng.choice([("[", "]"), ('{"a":', "}")])
        inner = opener * depth + "1" + closer * depth
        field = self.rng.choice(["messages", "tools", "stop", "user", "response_format"])
        return post_bytes(CHAT, f'{{"model": "scripted", "{field}": {inner}}}'.encode())

    def http(self) -> bytes:
        r = self.rng
        body = json.dumps(self.base()).encode()
        return r.choice([
            lambda: bytes(r.randrange(256) for _ in range(r.randint(1, 300))) + b"\r\n\r\n",
            lambda: b"POST " + CHAT.encode() + b" HTTP/9.9\r\nHost: x\r\n\r\n",
            lambda: b"P\x00ST / HTTP/1.1\r\n\r\n",
            lambda: b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost x\r\n\r\n",
            lambda: post_bytes(CHAT, body, headers={"Content-Length": "-1"}),
            lambda: post_bytes(CHAT, body, headers={"Content-Length": "abc"}),
            lambda: post_bytes(CHAT, body, extra_head=b"Content-Length: 3\r\n"),
            lambda: post_bytes(CHAT, body, extra_head=b"Transfer-Encoding: chunked\r\n"),
            lambda: post_bytes(CHAT, body, headers={"Transfer-Encoding": "gzip, chunked"}),
            lambda: post_bytes(CHAT, body, extra_head=b"X-Big: " + b"a" * 20_000 + b"\r\n"),
            lambda: post_bytes(CHAT, body, extra_head=b"".join(b"X-%d: 1\r\n" % i for i in range(500))),
            lambda: b"POST " + b"/v1/" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        ])()

    def headers(self) -> bytes:
        r = self.rng
        body = json.dumps(self.base()).encode()
        junk = bytes(r.randrange(128, 256) for _ in range(r.randint(1, 40)))
        return r.choice([
            lambda: post_bytes(CHAT, body, extra_head=b"Authorization: Bearer " + junk + b"\r\n"),
            lambda: post_bytes(CHAT, body, extra_head=b"Authorization: " + junk + b"\r\n"),
            lambda: post_bytes(CHAT, body, headers={"Content-Type": "text/plain; charset=latin-1"}),
            lambda: post_bytes(CHAT, body, extra_head=b"Content-Type: " + junk + b"\r\n"),
            lambda: post_bytes(CHAT, body, extra_head=b"Accept: " + junk + b"\r\n"),
            lambda: post_bytes(CHAT, body, headers={"Expect": "100-continue"}),
            lambda: post_bytes(CHAT, body, headers={"Connection": "upgrade", "Upgrade": "websocket"}),
        ])()

    def routes(self) -> bytes:
        r = self.rng
        method = r.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST", "BREW"])
        path = r.choice(["/v1/chat/completions", "/v1/models", "/v1/embeddings", "/health", "/",
                         "/v1/../../etc/passwd", "/v1/%00", "/v1/models/%ff", "//v1//models",
                         "/v1/chat/completions?x=" + "%" * 50, "/v1/" + "é" * 10])
        body = b"" if method in ("GET", "HEAD") else json.dumps({"input": self.value()}).encode()
        return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body

    def requests(self, n: int) -> Iterator[tuple[str, bytes]]:
        makers = {"json_fields": 6, "hostile_text": 4, "raw_bytes": 2, "nesting": 1, "http": 2,
                  "headers": 1, "routes": 1}
        names = list(makers)
        for _ in range(n):
            name = self.rng.choices(names, [makers[k] for k in names])[0]
            yield name, getattr(self, name)()


@pytest.fixture
def server(tmp_path: object) -> Iterator[ServerThread]:
    srv = ServerThread(scripted_spec(reply="Fine."), limits=ServeLimits(idle_timeout_s=5, body_timeout_s=5))
    yield srv
    srv.close()


def test_1400_hostile_requests_get_no_5xx_and_the_server_keeps_serving(
        server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    [pid] = server.runtime.pool.pids()
    requests = list(Hostile(SEED).requests(1400))
    host, port = server.handle.host, server.handle.port

    def send(item: tuple[str, bytes]) -> tuple[str, RawReply]:
        return item[0], exchange(host, port, item[1], timeout=30)

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(send, requests))

    outcomes: dict[str, Counter[int]] = defaultdict(Counter)
    bad = []
    for (kind, reply), (_, data) in zip(replies, requests, strict=True):
        outcomes[kind][reply.status] += 1
        head_only = data.startswith(b"HEAD ")  # an answer to HEAD has no body
        if reply.status >= 500 or (reply.status >= 400 and not head_only
                                   and "error" not in _json_or_empty(reply)):
            bad.append((kind, reply.status, data[:200], reply.body[:200]))
    report = {k: dict(sorted(v.items())) for k, v in sorted(outcomes.items())}
    print("\nserve fuzz outcomes (class -> HTTP status: count; 0 = closed without an answer):",
          json.dumps(report))
    assert not bad, bad[:5]
    assert sum(sum(c.values()) for c in outcomes.values()) == 1400
    assert outcomes["json_fields"][200] > 50, "some hostile-but-valid bodies must reach the model"
    assert server.runtime.pool.pids() == [pid] and server.runtime.pool.status()[0].restarts == 0
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    client = OpenAI(base_url=server.url, api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Fine."


def _json_or_empty(reply: RawReply) -> dict:
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}

