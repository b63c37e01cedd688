"""What the llama.cpp and MLX prefill tests behind `serve` share: a long prompt, a
streamed request left during its prefill, and Anthropic's message_start counts checked
against message_delta's."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx


def long_prompt(words: int, tag: str = "") -> str:
    """A prompt of about 6.5 tokens a word; `tag` keeps it apart from another's prefix."""
    return tag + " ".join(f"item{i} is a word" for i in range(words)) + ". What is item7?"


def served_model(url: str) -> str:
    """The first model /v1/models lists at `url` (the server's own)."""
    return httpx.get(url + "/models", timeout=30).json()["data"][0]["id"]


def open_then_leave(root: str, path: str, body: dict[str, Any], keepalive: bytes) -> bytes:
    """Send a streamed request on a raw socket, read until two keep-alives came, close."""
    where = urlsplit(root)
    data = json.dumps(body).encode()
    sock = socket.create_connection((where.hostname, where.port), timeout=60)
    try:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
        seen = b""
        while seen.count(keepalive) < 2:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
        return seen
    finally:
        sock.close()


def anthropic_usage(url: str, model: str, system: str, question: str) -> tuple[dict, dict]:
    """message_start's usage and message_delta's, of a streamed Anthropic request."""
    body = {"model": model, "max_tokens": 2, "stream": True, "system": system,
            "messages": [{"role": "user", "content": question}]}
    with httpx.stream("POST", url.removesuffix("/v1") + "/v1/messages", json=body,
                      timeout=300) as reply:
        assert reply.status_code == 200, reply.read()
        datas = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    start = next(d for d in datas if d["type"] == "message_start")["message"]["usage"]
    delta = next(d for d in datas if d["type"] == "message_delta")["usage"]
    return start, delta


def check_message_start_counts(url: str) -> None:
    """message_start carries the worker's count before the prefill, the cached tokens
    apart, as message_delta does (it carried an estimate and no cached part)."""
    model = served_model(url)
    system = long_prompt(60, "Count me. ")
    for turn, question in enumerate(("What is item3?", "And item4?")):
        start, delta = anthropic_usage(url, model, system, question)
        assert start == {**delta, "output_tokens": 0}, (turn, start, delta)
    assert start["cache_read_input_tokens"] > start["input_tokens"] > 0, start  # apart
