"""The service's listening side: the Unix socket, one Session per client.

Each accepted connection is checked (the peer's uid must be ours, and no more than
MAX_CLIENTS connections at once, counted from accept), greeted (hello with the protocol
version, within HELLO_TIMEOUT_S), then read line by line; every call's arguments are
checked against its schema (core.service.call_args) before it runs; each call runs in
its own task so a slow call never holds up the next, and answers go through the client's
Outbox. Whatever a client does wrong (garbage, a huge line, a stalled line, hanging up
mid-call) ends that client alone, with an error frame when it can still hear one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from core.service import errors, protocol
from core.service.dispatch import CallContext, CallError, ServiceControl, dispatch
from core.service.framing import MAX_OUT_BYTES, FrameError, LineReader, encode_line
from core.service.notices import Notices
from core.service.outbox import Outbox, SlowClient
from core.service.peer import peer_of
from core.service.turns import TurnHub

log = logging.getLogger("llmdeck.service")
HELLO_TIMEOUT_S = 5.0
MAX_CALLS_IN_FLIGHT = 64
MAX_CLIENTS = 64


class Session:
    """One connected client: its outbox, its subscriptions, its calls in flight."""

    def __init__(self, number: int, writer: asyncio.StreamWriter, pid: int | None) -> None:
        self.number = number
        self.pid = pid
        self.writer = writer
        self.outbox = Outbox(encode=_line)
        self.topics: set[str] = set()
        self.calls: set[asyncio.Task[None]] = set()
        self.running: dict[Any, asyncio.Task[None]] = {}  # call id -> its task (cancel_call)
        self.connected_at = time.time()
        self.closed = False
        self.client = "?"

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.outbox.put(message)
        except SlowClient as exc:
            log.warning("client %d dropped: %s", self.number, exc)
            self.close(abort=True)

    def close(self, abort: bool = False) -> None:
        """Hang up; `abort` drops what the socket still holds unsent (a client that does
        not read would otherwise keep it, and its connection, for ever)."""
        if not self.closed:
            self.closed = True
            self.outbox.close()
            if abort:
                self.writer.transport.abort()
            else:
                self.writer.close()

    async def write_loop(self) -> None:
        try:
            await self._write_all()
        except (ConnectionError, OSError):
            self.close()  # the client went; its read side ends the session

    async def _write_all(self) -> None:
        while not self.closed:
            line = await self.outbox.get()
            self.writer.write(line)
            await self.writer.drain()


def _line(message: dict[str, Any]) -> bytes:
    """A message as the line sent: an answer that is not JSON or is over the limit
    becomes an error line for its call instead."""
    try:
        line = encode_line(message)
    except ValueError:
        line = encode_line(protocol.error(protocol.FAILED, "The answer could not be "
                                          "written as JSON.", message.get("id")))
    if len(line) > MAX_OUT_BYTES:
        line = encode_line(protocol.error(
            protocol.TOO_LARGE, f"The answer is over {MAX_OUT_BYTES:,} bytes; ask for "
            "a smaller page.", message.get("id")))
    return line


class ServiceServer:
    def __init__(self, runtime: Any, path: Path, control: ServiceControl, *,
                 version: str | None = None) -> None:
        self.runtime = runtime
        # What the hello says; None: llmdeck's installed version, looked up at the first
        # hello (importlib.metadata, ~20 ms: a detached service pays it once).
        self.version = version
        self.path = path
        self.control = control
        self.sessions: set[Session] = set()
        self.hub = TurnHub(warning=self._tool_warning, can_always=self._can_always,
                           on_begin=self._turn_started)
        self.notices = Notices(self.broadcast)  # pushed to every client (core.service.notices)
        self.last_active = time.monotonic()
        self._server: asyncio.AbstractServer | None = None
        self._numbers = 0
        self.connections = 0  # accepted and not yet gone, greeted or not (the cap counts these)

    def _tool_warning(self, name: str) -> str | None:
        policy = getattr(getattr(self.runtime, "tools", None), "policy", None)
        return policy.warning(name) if policy is not None else None

    def _can_always(self, name: str) -> bool:
        policy = getattr(getattr(self.runtime, "tools", None), "policy", None)
        return bool(policy.can_always_allow(name)) if policy is not None else False

    async def start(self) -> None:
        """Listen on `path`: a stale socket of a dead service is replaced (the caller holds
        the home lock, so nobody else listens there); the socket is 0600 from birth."""
        from core.service.socket_path import prepare_folder

        prepare_folder(self.path.parent)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._accept, path=str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    def _turn_started(self, summary: dict[str, Any], starter: Any) -> None:
        """A reply started: every client subscribed to "turns" but its starter hears it."""
        for session in list(self.sessions):
            if session is not starter and "turns" in session.topics:
                session.send({"event": "turn_started", "data": summary})

    def broadcast(self, message: dict[str, Any], topic: str | None = None,
                  but: Any = None) -> None:
        for session in list(self.sessions):
            if session is not but and (topic is None or topic in session.topics):
                session.send(dict(message))

    def busy(self) -> bool:
        return bool(self.sessions) or self.hub.live_count() > 0

    async def close(self, reason: str, restart: bool = False) -> None:
        # "restart": a new service follows (`llmdeck service restart`): clients wait for it
        # instead of saying the service was stopped (core.service.client).
        self.broadcast({"event": "closing", "message": reason, "restart": restart})
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0.05)  # let the writers flush the closing line
        for session in list(self.sessions):
            session.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    async def serve_connection(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        """A client on a connection made elsewhere (core.service.loopback's socket pair):
        the same checks, hello and session as one accepted on the socket."""
        await self._accept(reader, writer)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Every connection counts against MAX_CLIENTS from the moment it is accepted (not
        once greeted: 500 arriving together would all pass a count of greeted ones)."""
        self.connections += 1
        try:
            await self._connection(reader, writer)
        finally:
            self.connections -= 1

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock: socket.socket | None = writer.get_extra_info("socket")
        peer = peer_of(sock) if sock is not None else None
        if peer is None or peer.uid != os.getuid():
            who = f"uid {peer.uid}" if peer is not None else "a client the system cannot name"
            log.warning("refused a connection from %s", who)
            await _say_and_close(writer, protocol.error(
                protocol.NOT_ALLOWED, f"This llmdeck service belongs to another user; "
                f"{who} may not use it. Run llmdeck as that user, or set LLMDECK_HOME to "
                "a folder of your own to run your own service."), reader)
            return
        if self.connections > MAX_CLIENTS:
            log.warning("refused a connection: %d clients already", MAX_CLIENTS)
            await _say_and_close(writer, protocol.error(
                protocol.TOO_MANY, f"The llmdeck service already has {MAX_CLIENTS} clients "
                "connected, its limit; close one (an app window, a `llmdeck serve`, a "
                "script) and try again."), reader)
            return
        self._numbers += 1
        session = Session(self._numbers, writer, peer.pid)
        lines = LineReader(reader)
        try:
            first = await asyncio.wait_for(lines.read(), HELLO_TIMEOUT_S)
        except (TimeoutError, FrameError, ConnectionError, OSError) as exc:
            code, message = _failure(exc, "No hello within the time allowed.")
            await _say_and_close(writer, protocol.error(code, message))
            return
        hello = first.get("hello") if isinstance(first, dict) else None
        if not isinstance(hello, dict) or hello.get("protocol") != protocol.PROTOCOL:
            await _say_and_close(writer, protocol.error(
                protocol.PROTOCOL_MISMATCH, f"Start with {{\"hello\": {{\"protocol\": "
                f"{protocol.PROTOCOL}}}}}; this service speaks protocol {protocol.PROTOCOL}."))
            return
        session.client = client_label(hello.get("client"))
        self.sessions.add(session)
        self.last_active = time.monotonic()
        log.info("client %d connected (%s, pid %s); %d now", session.number, session.client,
                 session.pid, len(self.sessions))
        self.version = self.version or _version()
        session.send({"hello": {"protocol": protocol.PROTOCOL, "version": self.version,
                                "pid": os.getpid()}})
        writing = asyncio.ensure_future(session.write_loop())
        try:
            await self._read_loop(session, lines)
        finally:
            self.sessions.discard(session)
            self.hub.unwatch_all(session)
            self.control.session_gone(session)
            self.last_active = time.monotonic()
            await asyncio.sleep(0)  # let a last queued line go
            session.close()
            writing.cancel()
            log.info("client %d gone; %d now", session.number, len(self.sessions))

    async def _read_loop(self, session: Session, lines: LineReader) -> None:
        while not session.closed:
            try:
                message = await lines.read()
            except FrameError as exc:
                log.info("client %d: %s", session.number, exc.code)
                await _say_and_close(session.writer, protocol.error(exc.code, exc.message))
                session.closed = True
                return
            except (ConnectionError, OSError):
                return
            if message is None:
                return
            call_id = message.get("id")
            if not protocol.valid_id(call_id) or "call" not in message:
                session.send(protocol.error(protocol.BAD_CALL, "A call is {\"id\": <number or "
                                            "short string>, \"call\": <name>, \"args\": {...}}.",
                                            call_id if protocol.valid_id(call_id) else None))
                continue
            if len(session.calls) >= MAX_CALLS_IN_FLIGHT:
                session.send(protocol.error(protocol.BAD_CALL, f"Over {MAX_CALLS_IN_FLIGHT} "
                                            "calls at once; wait for some answers.", call_id))
                continue
            task = asyncio.ensure_future(self._call(session, call_id, message))
            session.calls.add(task)
            session.running[call_id] = task
            task.add_done_callback(session.calls.discard)
            task.add_done_callback(lambda _t, i=call_id: session.running.pop(i, None))

    async def _call(self, session: Session, call_id: Any, message: dict[str, Any]) -> None:
        """One call, answered to its session (a session gone by then just drops it)."""
        name = message.get("call")
        ctx = CallContext(self.runtime, self.hub, session, self.control, call_id)
        self.last_active = time.monotonic()
        try:
            result = await dispatch(ctx, name, message.get("args"))
        except CallError as exc:
            session.send(protocol.error(exc.code, exc.message, call_id))
            return
        except asyncio.CancelledError:
            if session.running.get(call_id) is not asyncio.current_task():  # cancel_call
                session.send(protocol.error(protocol.FAILED, "Cancelled by the client.", call_id))
                return  # its caller gave up on it: the one answer it still waits for
            raise
        except Exception as exc:  # noqa: BLE001 - the call failed; the service goes on
            session.send(errors.answer(exc, protocol.FAILED, call_id, _sentence(exc)))
            log.warning("call %r failed: %s", str(name)[:60], type(exc).__name__)
            return
        session.send({"id": call_id, "result": result})
        self.notices.after_call(name, session)  # the other clients' sidebars, if it changed


def _sentence(exc: Exception) -> str:
    """What a failed call tells the client (core.service.errors.sentence)."""
    return errors.sentence(exc)


def _failure(exc: BaseException, timeout_text: str) -> tuple[str, str]:
    if isinstance(exc, FrameError):
        return exc.code, exc.message
    if isinstance(exc, TimeoutError):
        return protocol.TIMEOUT, timeout_text
    return protocol.BAD_FRAME, "The connection broke during the greeting."


def client_label(value: Any) -> str:
    """The hello's client name as the log and status show it: at most 40 plain characters,
    anything else a "?" (a name holding ESC, or a newline, would colour the terminal that
    reads the log or forge a line in it)."""
    text = value[:40] if isinstance(value, str) else ""
    return re.sub(r"[^A-Za-z0-9_.:/@+=-]", "?", text) or "?"


async def _say_and_close(writer: asyncio.StreamWriter, message: dict[str, Any],
                         reader: asyncio.StreamReader | None = None) -> None:
    """Send one error frame and hang up. With `reader`, what the client already sent (its
    hello) is read and dropped first: a socket closed with unread input resets the
    connection, and the client would get ECONNRESET instead of the sentence."""
    try:
        writer.write(encode_line(message))
        await asyncio.wait_for(writer.drain(), 1.0)
        if reader is not None:
            await asyncio.wait_for(reader.read(64 * 1024), 0.2)
    except (OSError, TimeoutError, ConnectionError):
        pass
    writer.close()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmdeck")
    except PackageNotFoundError:
        return "0+unknown"
