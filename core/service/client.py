"""Talking to the engine service: connect (or start it), call, watch turns and pushes.

    client = await connect("tui")               # or launch.start_or_connect: starts one
    convs = await client.call("list_conversations", limit=50)
    async for message in client.turn_events(turn_id): ...
    await client.close()

Every way of not getting an answer is a ServiceUnavailable with a sentence: no service
runs, it refused us (another user's), it crashed at start (the last line of its log),
it went away mid-call. A connection lost without close() is told to the listeners once,
as {"event": "lost", "message": <sentence>}. A call the service answers with an error is a ServiceCallError
(code and sentence).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from core.service import codec, errors, protocol
from core.service.framing import MAX_OUT_BYTES, FrameError, LineReader, encode_line

CONNECT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 60.0
MAX_BUFFERED_TURNS = 64  # turns whose events came before anyone asked for them


class ServiceUnavailable(Exception):
    """No answer from the service; `message` says why and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServiceCallError(Exception):
    """The service answered a call with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ServiceClient:
    """One connection to the service. Calls may run concurrently; events are routed to
    turn queues (turn_events) and to listeners of pushed topics (on_event)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 server_hello: dict[str, Any], lines: LineReader, name: str = "client") -> None:
        self.name = name
        self._writer = writer
        self._lines = lines
        self.hello = server_hello
        self.pid: int | None = server_hello.get("pid")
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._turns: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.closed_reason: str | None = None
        # Told by the service as it closed: stopped (by a person, `service stop`, a signal,
        # idle) or restarting (`service restart`: a new one follows). Neither: it crashed.
        self.stopped = False
        self.restarting = False
        self._closing = False
        self._lost_told = False
        self._reading = asyncio.ensure_future(self._read_loop())

    async def _read_loop(self) -> None:
        reason = ("The llmdeck service stopped without a word (it crashed or was killed); "
                  "see its log.")
        try:
            while True:
                message = await self._lines.read()
                if message is None:
                    break
                self._route(message)
        except FrameError as exc:
            reason = f"The llmdeck service sent something unreadable ({exc.message})."
        except (ConnectionError, OSError):
            reason = "The connection to the llmdeck service broke (did it crash?)."
        finally:
            self._fail_all(reason)

    def _route(self, message: dict[str, Any]) -> None:
        call_id = message.get("id")
        if "event" in message:
            if message["event"] in ("turn", "turn_end", "approve"):
                self._turn_queue(str(message.get("turn"))).put_nowait(message)
            if message["event"] == "closing":
                self.closed_reason = str(message.get("message", ""))
                self.restarting = message.get("restart") is True
                self.stopped = not self.restarting
            for listener in list(self.listeners):
                listener(message)
            return
        future = self._pending.pop(call_id, None) if isinstance(call_id, int) else None
        if "error" in message:
            err = message["error"] if isinstance(message["error"], dict) else {}
            exc = errors.rebuild(err, ServiceCallError)  # StoreError, LookupError, ...
            if future is not None:
                if not future.done():
                    future.set_exception(exc)
            else:  # about the connection itself: it ends
                self._fail_all(str(err.get("message", "")))
            return
        if future is not None and not future.done():
            try:
                future.set_result(codec.decode(message.get("result")))
            except codec.CodecError as exc:
                future.set_exception(ServiceCallError(protocol.BAD_FRAME, str(exc)))

    def _turn_queue(self, turn_id: str) -> asyncio.Queue[dict[str, Any] | None]:
        queue = self._turns.get(turn_id)
        if queue is None:
            if len(self._turns) >= MAX_BUFFERED_TURNS:
                self._turns.pop(next(iter(self._turns)))
            queue = self._turns[turn_id] = asyncio.Queue()
        return queue

    def _fail_all(self, reason: str) -> None:
        first = self.closed_reason is None or not self._lost_told
        if self.closed_reason is None:
            self.closed_reason = reason
        if first and not self._closing:
            self._lost_told = True  # once: the UI says it in a sentence and reconnects
            for listener in list(self.listeners):
                listener({"event": "lost", "message": self.closed_reason})
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ServiceUnavailable(reason))
        self._pending.clear()
        for queue in self._turns.values():
            queue.put_nowait(None)

    @property
    def connected(self) -> bool:
        return not self._reading.done()

    async def call(self, name: str, /, timeout: float | None = None, **args: Any) -> Any:
        """Ask the service; returns the decoded result (`name` is positional: a call may
        have an argument called name)."""
        if not self.connected:
            raise ServiceUnavailable(self.closed_reason or "Not connected to the llmdeck service.")
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self._writer.write(encode_line({"id": call_id, "call": name,
                                            "args": codec.encode(args)}))
            await self._writer.drain()
        except (ConnectionError, OSError):
            self._pending.pop(call_id, None)
            raise ServiceUnavailable("The connection to the llmdeck service broke.") from None
        if timeout is None:
            return await future
        # Not wait_for's TimeoutError: the service may answer with one (a TimeoutError it
        # raised crosses as itself), which is not ours to read as silence.
        done, _ = await asyncio.wait({future}, timeout=timeout)
        if not done:
            self._pending.pop(call_id, None)
            future.cancel()
            raise ServiceUnavailable(f"The llmdeck service did not answer {name} within "
                                     f"{timeout:.0f} s.")
        return future.result()

    async def turn_events(self, turn_id: str) -> AsyncIterator[dict[str, Any]]:
        """The turn's messages (turn, approve, then turn_end) as they arrive; ends after
        turn_end, or with ServiceUnavailable when the connection goes."""
        queue = self._turn_queue(turn_id)
        try:
            while True:
                message = await queue.get()
                if message is None:
                    raise ServiceUnavailable(self.closed_reason or "The llmdeck service went away.")
                yield message
                if message.get("event") == "turn_end":
                    return
        finally:
            if self._turns.get(turn_id) is queue and queue.empty():
                self._turns.pop(turn_id, None)

    async def close(self) -> None:
        self._closing = True
        self._reading.cancel()
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


async def connect(client: str = "cli", *, path: Path | None = None,
                  timeout: float = CONNECT_TIMEOUT_S) -> ServiceClient:
    """Connect and greet. ServiceUnavailable when no service listens (FileNotFoundError /
    ConnectionRefusedError are kept as __cause__: then nothing listens), refuses us, or
    does not greet within `timeout`."""
    from core.service.socket_path import socket_path

    target = path or socket_path()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(target)), timeout)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise ServiceUnavailable(f"No llmdeck service is running on this home "
                                 f"(nothing listens at {target}).") from exc
    except PermissionError as exc:
        raise ServiceUnavailable(f"The llmdeck service's socket {target} belongs to another "
                                 "user; set LLMDECK_HOME to a folder of your own.") from exc
    except (TimeoutError, OSError) as exc:
        raise ServiceUnavailable(f"Could not reach the llmdeck service at {target} "
                                 f"({exc.__class__.__name__}).") from exc
    # The other way round too: a socket someone else planted (the /tmp fallback is a
    # shared folder) must not get our prompts. Whoever listens must be us.
    from core.service.peer import peer_of

    sock = writer.get_extra_info("socket")
    peer = peer_of(sock) if sock is not None else None
    if peer is not None and peer.uid != os.getuid():
        writer.close()
        raise ServiceUnavailable(f"The process listening at {target} belongs to another user "
                                 f"(uid {peer.uid}); llmdeck will not talk to it. Remove the "
                                 "socket, or set LLMDECK_HOME to a folder of your own.")
    return await greet(reader, writer, client, str(target), timeout)


async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str,
                target: str, timeout: float = CONNECT_TIMEOUT_S) -> ServiceClient:
    """Say hello on a connection made (connect's socket, or core.service.loopback's pair)
    and wait for the service's; the connected ServiceClient."""
    lines = LineReader(reader, max_bytes=MAX_OUT_BYTES + 1024)
    try:
        writer.write(encode_line(protocol.hello(client)))
        await writer.drain()
        first = await asyncio.wait_for(lines.read(), timeout)
    except (ConnectionResetError, BrokenPipeError) as exc:
        # Queued on a listener that was closing (a service that just died or idled out):
        # as good as nobody listening, so the caller may start one.
        writer.close()
        raise ServiceUnavailable(f"The llmdeck service at {target} went away as we "
                                 "connected.") from ConnectionRefusedError(str(exc))
    except (TimeoutError, FrameError, ConnectionError, OSError) as exc:
        writer.close()
        raise ServiceUnavailable("The llmdeck service did not greet us "
                                 f"({exc.__class__.__name__}); see `llmdeck service status`.") from exc
    if first is None or "error" in first:
        writer.close()
        err = (first or {}).get("error") or {}
        raise ServiceUnavailable(str(err.get("message") if isinstance(err, dict) else "")
                                 or "The llmdeck service hung up on the greeting.")
    hello = first.get("hello")
    if not isinstance(hello, dict) or hello.get("protocol") != protocol.PROTOCOL:
        writer.close()
        raise ServiceUnavailable("The running llmdeck service speaks another protocol version; "
                                 "restart it with `llmdeck service restart`.")
    return ServiceClient(reader, writer, hello, lines, client)


def run_call(name: str, timeout: float = 30.0, **args: Any) -> Any:
    """For a CLI: one call to a running service (ServiceUnavailable when none runs)."""
    async def _once() -> Any:
        c = await connect("cli")
        try:
            return await c.call(name, timeout=timeout, **args)
        finally:
            await c.close()

    return asyncio.run(_once())
