"""Raw HTTP/1.1 over a socket, for requests no well-behaved client library will send
(non-UTF-8 headers, lying Content-Length, bodies that arrive a byte at a time)."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RawReply:
    status: int
    head: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def post_bytes(path: str, body: bytes, *, headers: dict[str, str] | None = None,
               extra_head: bytes = b"") -> bytes:
    """A complete POST request as bytes (Content-Length from the body unless given)."""
    head = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(body)),
            "Connection": "close", **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"POST {path} HTTP/1.1\r\n{lines}".encode() + extra_head + b"\r\n" + body


def exchange(host: str, port: int, data: bytes, timeout: float = 30.0) -> RawReply:
    """Send `data`, read until the server closes, parse the status line and body."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (413) and closed; read what it sent
        return read_reply(sock)


def read_reply(sock: socket.socket) -> RawReply:
    """Read one response: to its Content-Length, its last chunk, or the close."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            if _complete(data):
                break
    except ConnectionResetError:
        pass
    return parse_reply(data)


def _complete(data: bytes) -> bool:
    while data.startswith(b"HTTP/1.1 100 ") and b"\r\n\r\n" in data:
        data = data.partition(b"\r\n\r\n")[2]
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.decode("latin-1").lower().split("\r\n"):
        if line.startswith("content-length:"):
            return len(body) >= int(line.split(":", 1)[1])
        if line.startswith("transfer-encoding:") and "chunked" in line:
            return body.endswith(b"0\r\n\r\n")
    return False


def parse_reply(data: bytes) -> RawReply:
    while data.startswith(b"HTTP/1.1 100 "):  # an interim "100 Continue": the answer follows
        data = data.partition(b"\r\n\r\n")[2]
    head, _, body = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else 0
    if "transfer-encoding: chunked" in text.lower():
        pieces, rest = [], body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size or b"0", 16)
            if n == 0:
                break
            pieces.append(rest[:n])
            rest = rest[n + 2:]
        body = b"".join(pieces)
    return RawReply(status, text, body)


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed this connection (None if it stayed open)."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except (ConnectionResetError, OSError):
            return time.monotonic() - start
    return None
