"""A blocking client for callers without an event loop of their own to spare (the MCP
stdio server's tool functions): one socket, one call at a time, the same framing and
codec as the async client."""

from __future__ import annotations

import socket
import threading
from typing import Any

from core.service import codec, protocol
from core.service.client import ServiceCallError, ServiceUnavailable
from core.service.framing import MAX_OUT_BYTES, FrameError, decode_line, encode_line


class BlockingClient:
    def __init__(self, path: str, timeout: float = 30.0, client: str = "blocking") -> None:
        self._lock = threading.Lock()
        self._ids = 0
        self._buf = bytearray()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
            self._sock.sendall(encode_line(protocol.hello(client)))
            hello = self._read()
        except OSError as exc:
            self._sock.close()
            raise ServiceUnavailable(f"No llmdeck service answers at {path} "
                                     f"({exc.__class__.__name__}).") from exc
        if not isinstance(hello.get("hello"), dict):
            self._sock.close()
            err = hello.get("error") if isinstance(hello.get("error"), dict) else {}
            raise ServiceUnavailable(str(err.get("message") or "The llmdeck service refused us."))

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_OUT_BYTES:
                raise ServiceUnavailable("The llmdeck service sent an over-long line.")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ServiceUnavailable("The llmdeck service closed the connection.")
            self._buf += chunk
        end = self._buf.index(b"\n")
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        try:
            return decode_line(line)
        except FrameError as exc:
            raise ServiceUnavailable(exc.message) from None

    def call(self, name: str, **args: Any) -> Any:
        with self._lock:
            self._ids += 1
            call_id = self._ids
            try:
                self._sock.sendall(encode_line({"id": call_id, "call": name,
                                                "args": codec.encode(args)}))
                while True:
                    message = self._read()
                    if message.get("id") == call_id:
                        break  # events (none are asked for) are skipped
            except OSError as exc:
                raise ServiceUnavailable(f"The llmdeck service did not answer {name} "
                                         f"({exc.__class__.__name__}).") from exc
        if "error" in message:
            err = message["error"] if isinstance(message["error"], dict) else {}
            raise ServiceCallError(str(err.get("code")), str(err.get("message")))
        return codec.decode(message.get("result"))

    def close(self) -> None:
        self._sock.close()
