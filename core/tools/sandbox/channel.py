"""The sandbox's wire: length-prefixed JSON frames over a socketpair, checked on arrival.

Every message between the app, the supervisor and the runner is one frame: four bytes of
big-endian length, then that many bytes of UTF-8 JSON holding one object. Nothing on this
wire is ever executed or unpickled: the code in the sandbox can write anything to any
socket it can reach, so each side reads at most MAX_FRAME bytes per frame, refuses a
frame that is not exactly one of the shapes in SCHEMAS (keys, types, lengths), and the
app reads every byte within the run's deadline.

Standard library only: the supervisor and the runner load this file as a plain module
(they run as scripts, without the llmdeck package on their path).
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

MAX_FRAME = 8 << 20  # bytes of JSON in one frame (a figure is the largest honest message)
HEADER = struct.Struct(">I")
TEXT_LIMIT = 21_000  # characters per text field (the runner cuts output at 20,000)
NOTE_LIMIT = 2_000
CODE_LIMIT = 1 << 20  # characters of code in one run
ID_LIMIT = 32
FIGURE_BYTES = 4 << 20  # one PNG, before base64
FIGURES_PER_RUN = 8
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KINDS = ("exception", "memory", "crashed", "cpu")
WALL_NAMES_LIMIT = 16


class ChannelError(Exception):
    """The other side broke the protocol (str: what, for the log and the test)."""


class Closed(ChannelError):
    """The other side closed its end (it exited, or was killed)."""


class TimedOut(ChannelError):
    """The deadline passed before a whole frame arrived."""


def _text(limit: int, optional: bool = False) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if value is None:
            return optional
        return isinstance(value, str) and len(value) <= limit
    return check


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _kind(value: Any) -> bool:
    return value is None or value in KINDS


def _walls(value: Any) -> bool:
    return (isinstance(value, dict) and len(value) <= WALL_NAMES_LIMIT
            and all(isinstance(k, str) and len(k) <= 40 and isinstance(v, bool)
                    for k, v in value.items()))


def _png(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= (FIGURE_BYTES * 4) // 3 + 4


RESULT: dict[str, Callable[[Any], bool]] = {
    "id": _text(ID_LIMIT), "ok": _flag, "stdout": _text(TEXT_LIMIT), "stderr": _text(TEXT_LIMIT),
    "value": _text(TEXT_LIMIT, True), "error": _text(TEXT_LIMIT, True), "kind": _kind,
    "note": _text(NOTE_LIMIT, True), "restart": _flag,
}
# Every message there is, by its "t"; a frame is exactly one of these (no key more or less).
SCHEMAS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "run": {"id": _text(ID_LIMIT), "code": _text(CODE_LIMIT)},  # app -> supervisor -> runner
    "ready": {"walls": _walls},  # supervisor -> app (the runner sends it with no walls: {})
    "failed": {"why": _text(NOTE_LIMIT)},  # launcher -> app: the walls could not go up
    "refused": {"why": _text(NOTE_LIMIT)},  # launcher -> app: it will not run unwalled
    "figure": {"id": _text(ID_LIMIT), "png": _png},
    "result": RESULT,
}


def check(message: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """`message` if it is one of the `allowed` shapes, else ChannelError saying why."""
    if not isinstance(message, dict):
        raise ChannelError("a frame that is not a JSON object")
    kind = message.get("t")
    if kind not in allowed:
        raise ChannelError(f"an unexpected message type {str(kind)[:40]!r}")
    schema = SCHEMAS[kind]
    if set(message) != {"t", *schema}:
        raise ChannelError(f"a {kind!r} message with the wrong fields")
    for key, ok in schema.items():
        if not ok(message[key]):
            raise ChannelError(f"a {kind!r} message whose {key!r} is not allowed")
    return message


def figure_bytes(message: dict[str, Any]) -> bytes:
    """The PNG a checked figure message holds (ChannelError when it is not a PNG)."""
    try:
        data = base64.b64decode(message["png"], validate=True)
    except (ValueError, TypeError):
        raise ChannelError("a figure that is not base64") from None
    if len(data) > FIGURE_BYTES or not data.startswith(PNG_MAGIC):
        raise ChannelError("a figure that is not a PNG of at most 4 MiB")
    return data


def encode(message: dict[str, Any]) -> bytes:
    """One frame (ValueError when the message would not fit in MAX_FRAME)."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ValueError("message larger than a frame")
    return HEADER.pack(len(body)) + body


def decode(body: bytes, loads: Callable[[bytes], Any] = json.loads) -> Any:
    try:
        return loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise ChannelError("a frame that is not JSON") from None


def send(sock: socket.socket, message: dict[str, Any], timeout: float | None = None) -> None:
    """Write one frame whole (blocking up to `timeout`; OSError when the peer is gone)."""
    sock.settimeout(timeout)
    sock.sendall(encode(message))


def read_frame(sock: socket.socket, deadline: float | None,
               loads: Callable[[bytes], Any] = json.loads) -> Any:
    """Read one frame from a blocking-mode socket, never past `deadline` (time.monotonic)
    and never more than MAX_FRAME bytes: the supervisor's and the runner's reader."""
    header = _read_exact(sock, HEADER.size, deadline, first=True)
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ChannelError(f"a frame of {size} bytes, over the {MAX_FRAME} byte limit")
    return decode(_read_exact(sock, size, deadline), loads)


def _read_exact(sock: socket.socket, size: int, deadline: float | None,
                first: bool = False) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut("no whole frame before the deadline")
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                continue
        try:
            chunk = sock.recv(min(size - got, 1 << 20))
        except InterruptedError:
            continue
        except OSError as exc:
            raise Closed(f"the channel failed ({exc.strerror})") from None
        if not chunk:
            raise Closed("the other side closed the channel" if first and not got
                         else "a frame cut short")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def inheritable_pair() -> tuple[socket.socket, socket.socket]:
    """A socketpair whose second end a child may inherit (the first stays ours only)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    os.set_inheritable(theirs.fileno(), True)
    return ours, theirs


async def read_frame_async(sock: socket.socket, deadline: float,
                           loads: Callable[[bytes], Any] = json.loads) -> Any:
    """The app's reader: one frame from a non-blocking socket, on the event loop, within
    `deadline` (time.monotonic), reading at most MAX_FRAME bytes of it."""
    import asyncio

    loop = asyncio.get_running_loop()

    async def exact(size: int, first: bool = False) -> bytes:
        buf = bytearray()
        while len(buf) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut("no whole frame before the deadline")
            try:
                chunk = await asyncio.wait_for(
                    loop.sock_recv(sock, min(size - len(buf), 1 << 20)), left)
            except TimeoutError:
                raise TimedOut("no whole frame before the deadline") from None
            except OSError as exc:
                raise Closed(f"the channel failed ({exc.strerror})") from None
            if not chunk:
                raise Closed("the other side closed the channel" if first and not buf
                             else "a frame cut short")
            buf += chunk
        return bytes(buf)

    (size,) = HEADER.unpack(await exact(HEADER.size, first=True))
    if size > MAX_FRAME:
        raise ChannelError(f"a frame of {size} bytes, over the {MAX_FRAME} byte limit")
    return decode(await exact(size), loads)
