"""The stdio transport to an MCP server, with every stream from it bounded.

The SDK's own stdio client buffers a line until its newline, however long (a 200 MB tool
result is held whole, and re-scanned at every chunk), hands each line that is not JSON to
the session as an error, and writes stderr wherever it is told, without end. A server is
outside code: here

- a message (one stdout line) is at most MAX_MESSAGE_BYTES; a longer one is dropped as
  it streams, never held, and the request it answers gets an error (its id is read from
  the line's first bytes) instead of waiting for its timeout;
- lines that are not JSON-RPC (a flood of prints on stdout) are counted and dropped;
- stderr goes to a CappedLog (core.tools.mcp.server_log), rotated, never more than 2 MiB;
- a line over OFFLOAD_BYTES is parsed in a worker thread, never on the event loop, and
  an answer to a listing (tools/list, prompts/list, resources/list) keeps at most
  MAX_LISTED entries: a server listing 10,000 tools costs the loop nothing (the
  connection takes MAX_TOOLS of them and says so).

Shutdown follows the MCP spec as the SDK does: stdin closed, a grace period, SIGTERM to
the server's process group, then SIGKILL. The server runs in its own session, so its
children go with it.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from core.tools.mcp.server_log import CappedLog

MAX_MESSAGE_BYTES = 32 * 1024 * 1024  # a 20 MB image, base64, in one result fits
GRACE_S = 2.0  # after stdin closes, before SIGTERM
OFFLOAD_BYTES = 64 * 1024  # a longer line is parsed off the event loop
# Entries of a listing passed on to the session: a few more than the connection takes
# (MAX_TOOLS, 128), so that it sees there were more and says so.
MAX_LISTED = 160
_LISTINGS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources"}
TOO_LARGE_CODE = -32099  # our own code (JSON-RPC leaves -32000..-32099 to implementations)
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,18})')


@dataclass
class StdioStats:
    """What was dropped from a server's stdout, for its log and the status pane."""

    junk_lines: int = 0
    too_large: int = 0


@dataclass(frozen=True, slots=True)
class TooLong:
    head: bytes
    size: int


class MessageLines:
    """Splits stdout into lines of at most `cap` bytes; a longer one is dropped while it
    streams (its first bytes kept to find its id)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.pending = bytearray()
        self.skipping: bytearray | None = None  # the dropped line's head while skipping
        self.skipped = 0

    def feed(self, chunk: bytes) -> list[bytes | TooLong]:
        out: list[bytes | TooLong] = []
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self.skipping is not None:
                self.skipped += len(piece)
                if end >= 0:
                    out.append(TooLong(bytes(self.skipping), self.skipped))
                    self.skipping, self.skipped = None, 0
            elif len(self.pending) + len(piece) > self.cap:
                self.skipping = bytearray((self.pending + piece)[:512])
                self.skipped = len(self.pending) + len(piece)
                self.pending.clear()
                if end >= 0:
                    out.append(TooLong(bytes(self.skipping), self.skipped))
                    self.skipping, self.skipped = None, 0
            elif end >= 0:
                self.pending += piece
                out.append(bytes(self.pending))
                self.pending.clear()
            else:
                self.pending += piece
            if end < 0:
                break
            start = end + 1
        return out


def _refusal(line: TooLong) -> SessionMessage | None:
    """An error answer for the request a too-large line answered (None when its id
    cannot be read from its first bytes: that request then ends at its timeout)."""
    found = _ID.search(line.head)
    if found is None:
        return None
    raw = found.group(1)
    request_id: str | int = raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)
    mib = MAX_MESSAGE_BYTES // (1024 * 1024)
    error = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(
        code=TOO_LARGE_CODE, message=f"its answer was larger than {mib} MiB and was dropped unread"))
    return SessionMessage(error)


def _message(line: bytes, listings: dict[Any, str] | None = None) -> SessionMessage | None:
    """A line as the session's message (None when it is not JSON-RPC). The answer to a
    listing request (`listings`: request id -> the listing's key) keeps MAX_LISTED
    entries and loses its next cursor: the rest is never parsed."""
    stripped = line.strip()
    if not stripped.startswith(b"{"):
        return None
    try:
        if not listings:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(stripped, by_name=False))
        data = json.loads(stripped)
        result = data.get("result") if isinstance(data, dict) else None
        key = listings.get(data.get("id")) if isinstance(data, dict) else None
        if key and isinstance(result, dict) and isinstance(result.get(key), list) \
                and len(result[key]) > MAX_LISTED:
            result[key] = result[key][:MAX_LISTED]
            result.pop("nextCursor", None)
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    except (ValueError, RecursionError):
        return None


@contextlib.asynccontextmanager
async def bounded_stdio(command: str, args: list[str], env: dict[str, str], log: CappedLog,
                        on_start: Callable[[int], None], stats: StdioStats | None = None,
                        ) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Any], MemoryObjectSendStream[Any]]]:
    """Start the server and yield the session's (read, write) streams, as the SDK's
    stdio_client does; `on_start` gets the server's pid."""
    stats = stats or StdioStats()
    process = await anyio.open_process([command, *args], env=get_default_environment() | env,
                                       stderr=subprocess.PIPE, start_new_session=True)
    on_start(process.pid)
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    listings: dict[Any, str] = {}  # listing requests waiting for their answer: id -> key

    async def read_stdout() -> None:
        assert process.stdout is not None
        lines = MessageLines(MAX_MESSAGE_BYTES)
        async with to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError,
                                     anyio.BrokenResourceError, OSError):
                while True:
                    for line in lines.feed(await process.stdout.receive()):
                        if isinstance(line, TooLong):
                            stats.too_large += 1
                            log.write(f"[llmdeck] dropped a {line.size:,}-byte message from "
                                      f"stdout (over {MAX_MESSAGE_BYTES:,} bytes)\n".encode())
                            message = _refusal(line)
                        elif len(line) > OFFLOAD_BYTES:
                            message = await anyio.to_thread.run_sync(_message, line, dict(listings))
                        else:
                            message = _message(line)
                            if message is None and line.strip():
                                stats.junk_lines += 1
                                if stats.junk_lines in (1, 10, 100, 1000) or stats.junk_lines % 100_000 == 0:
                                    log.write(f"[llmdeck] {stats.junk_lines:,} line(s) on stdout that are not "
                                              "JSON-RPC were dropped; the first bytes of the last: "
                                              f"{line[:120]!r}\n".encode())
                        if message is not None:
                            await to_session.send(message)

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError,
                                 anyio.BrokenResourceError, OSError):
            while True:
                log.write(await process.stderr.receive())

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    method = getattr(message.message, "method", None)
                    if method in _LISTINGS:
                        if len(listings) > 64:
                            listings.clear()
                        listings[getattr(message.message, "id", None)] = _LISTINGS[method]
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the connection end, not a hang

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(read_stderr)
        tg.start_soon(write_stdin)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """stdin closed, GRACE_S to exit, then SIGTERM and SIGKILL to its process group."""
    assert process.stdin is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.05)
    if process.returncode is None:
        await terminate_posix_process_tree(process)
    with anyio.move_on_after(GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.05)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()
