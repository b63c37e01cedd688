"""One MCP server: started on first use, its tools, prompts and resources listed, calls
bounded by a timeout, and every way it can go wrong turned into a sentence.

The SDK's transports and session are anyio context managers that must be entered and left
in the same task, so each connection owns one task that opens them, reports "ready" and
then waits to be told to stop; calls from other tasks go through the open session.

stdio servers are started by core.tools.mcp.stdio (its own session and process group,
stdin closed then SIGTERM then SIGKILL at stop, every stream from it bounded): the shared
child-process bootstrap in core/workers runs inside Python children and cannot wrap an
arbitrary command, and a server whose app dies sees its stdin close and exits. What a
server lists is bounded too (_list): a server is outside code, its names outside data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from core.terminal_text import visible
from core.tools.mcp.server_log import CappedLog, last_words, log_path
from core.wire.tools import McpCallError

if TYPE_CHECKING:
    from mcp import ClientSession

    from core.config import McpServerConfig

T = TypeVar("T")
State = Literal["stopped", "starting", "ready", "crashed", "failed"]
START_TIMEOUT_S = 20.0
MAX_RESTARTS = 3  # a server that dies this often stays failed until settings change
STOP_TIMEOUT_S = 8.0  # the stop: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL
# What one server may offer: a server listing 10,000 tools would fill every prompt.
MAX_TOOLS = 128
MAX_PROMPTS = 256
MAX_RESOURCES = 256
MAX_PAGES = 20  # of a paginated listing (a cursor that never ends)
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_CHARS = 64 * 1024
# A tool or prompt name becomes `server.name` (a function name for the model, a slash
# command, a file name for a picture it returns): letters, digits, _ - and single dots.
_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
MAX_NAME_CHARS = 64

# The SDK logs protocol trouble (a line that is not JSON) with tracebacks; the call's
# own error says it, and nothing must print over the full-screen UI.
logging.getLogger("mcp").addHandler(logging.NullHandler())
logging.getLogger("mcp").propagate = False


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    name: str
    description: str
    schema: dict[str, Any]
    read_only: bool


@dataclass(frozen=True, slots=True)
class McpPromptInfo:
    name: str
    description: str
    arguments: tuple[tuple[str, bool], ...]  # (name, required)


@dataclass(frozen=True, slots=True)
class McpResourceInfo:
    uri: str
    name: str
    mime_type: str


@dataclass
class McpListing:
    tools: list[McpToolInfo] = field(default_factory=list)
    prompts: list[McpPromptInfo] = field(default_factory=list)
    resources: list[McpResourceInfo] = field(default_factory=list)


def name_problem(name: str) -> str | None:
    """Why a tool or prompt name a server offers cannot be used (None when it can)."""
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if not _NAME.fullmatch(name):
        return "not letters, digits, _, - and single dots"
    return None


def _shown_name(name: str) -> str:
    return repr(visible(name[:40]) + ("…" if len(name) > 40 else ""))


class McpConnection:
    """A configured server and its session; `ensure_started()` before anything else."""

    def __init__(self, config: McpServerConfig, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.state: State = "stopped"
        self.error: str | None = None
        self.notes: list[str] = []  # what was refused of its listing, for the status pane
        self.restarts = 0
        self.pid: int | None = None
        self.active = 0
        self.listing = McpListing()
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._starts = 0

    @property
    def name(self) -> str:
        return self.config.name

    # -- lifecycle -------------------------------------------------------------------------
    async def ensure_started(self, timeout: float | None = None) -> bool:
        """Start the server if it is not running (a crashed one again, within the restart
        budget) and wait until it is ready or failed; True when it is ready."""
        if self.state == "crashed":
            if self.restarts >= MAX_RESTARTS:
                self.state = "failed"
                self.error = (f"stopped {self.restarts + 1} times; fix it, then turn it off and "
                              "on again in settings (F3)")
            else:
                self.restarts += 1
                self.state = "stopped"
        if self.state == "stopped":
            timeout = timeout or self.start_timeout_s
            self.state, self.error = "starting", None
            self._ready, self._stop = asyncio.Event(), asyncio.Event()
            self._task = asyncio.ensure_future(self._own(self._ready, self._stop, timeout))
        if self.state == "starting" and self._ready is not None:
            await self._ready.wait()
        return self.state == "ready"

    async def _own(self, ready: asyncio.Event, stop: asyncio.Event, timeout: float) -> None:
        """The task that holds the transport and session open until `stop` is set."""
        self._starts += 1
        generation = self._starts
        problem: str | None = None
        try:
            # The SDK's first import costs a second on a busy machine: never on the loop.
            await asyncio.to_thread(_import_sdk, bool(self.config.command))
            import anyio

            async with contextlib.AsyncExitStack() as stack:
                errlog = stack.enter_context(CappedLog(log_path(self.name))) if self.config.command else None
                streams = await stack.enter_async_context(self._transport(errlog))
                from mcp import ClientSession

                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                with anyio.fail_after(timeout):
                    init = await session.initialize()
                    listing, notes = await self._list(session, init.capabilities)
                self._session, self.listing, self.notes = session, listing, notes
                self.state, self.error = "ready", None
                ready.set()
                await stop.wait()
        except TimeoutError:
            problem = f"did not finish starting within {timeout:g} s"
        except PermissionError:
            problem = f"command {self.config.command!r} is not executable"
        except asyncio.CancelledError:
            problem = "start-up was cancelled"
            raise
        except BaseException as exc:  # noqa: BLE001 - an ExceptionGroup from anyio, a bad URL...
            problem = self._start_problem(exc, timeout)
        finally:
            # A newer start may own this connection already (a restart after a crash):
            # then this task's ending, however it ended, changes nothing.
            if generation == self._starts:
                self._session = None
                if self.state == "starting":
                    self._fail(problem or "stopped while starting")
                elif self.state == "ready":  # the connection ended without being told to
                    self.state = "stopped" if stop.is_set() else "crashed"
                    if not stop.is_set():
                        self.error, self.pid = "the server stopped unexpectedly", None
            ready.set()

    def _transport(self, errlog: CappedLog | None) -> contextlib.AbstractAsyncContextManager[Any]:
        c = self.config
        if c.command and errlog is not None:
            from core.tools.mcp.stdio import bounded_stdio

            def started(pid: int) -> None:
                self.pid = pid

            return bounded_stdio(c.command, list(c.args), dict(c.env), errlog, started)
        from mcp.client.streamable_http import streamable_http_client

        from core.tools.mcp.http_limits import capped_client
        from core.tools.mcp.stdio import MAX_MESSAGE_BYTES

        client = capped_client(dict(c.headers) or None)
        return streamable_http_client(c.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES)

    @staticmethod
    async def _list(session: ClientSession, caps: Any) -> tuple[McpListing, list[str]]:
        """What the server offers, within bounds: at most MAX_TOOLS tools (and prompts,
        resources), names that are safe to use, descriptions and schemas of sane size.
        The rest is refused, each kind with one note for the status pane."""
        listing = McpListing()
        refused: dict[str, list[str]] = {}
        if caps is None or caps.tools is not None:
            from mcp.types import PaginatedRequestParams

            cursor, offered = None, 0
            for _ in range(MAX_PAGES):
                page = await session.list_tools(
                    params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                for t in page.tools:
                    offered += 1
                    problem = name_problem(t.name) or _schema_problem(t.input_schema)
                    if problem:
                        refused.setdefault("tool", []).append(f"{_shown_name(t.name)} ({problem})")
                    elif len(listing.tools) < MAX_TOOLS:
                        hints = t.annotations
                        description = t.description or t.title or t.name
                        listing.tools.append(McpToolInfo(
                            t.name, description[:MAX_DESCRIPTION_CHARS], dict(t.input_schema or {}),
                            bool(hints and hints.read_only_hint)))
                cursor = page.next_cursor
                if not cursor or offered > MAX_TOOLS * 4:
                    break
            if offered > len(listing.tools) + len(refused.get("tool", [])):
                refused.setdefault("over", []).append(
                    f"it offers more than {MAX_TOOLS} tools; only the first {MAX_TOOLS} were taken")
        if caps is not None and caps.prompts is not None:
            for p in (await session.list_prompts()).prompts:
                if problem := name_problem(p.name):
                    refused.setdefault("prompt", []).append(f"{_shown_name(p.name)} ({problem})")
                elif len(listing.prompts) < MAX_PROMPTS:
                    args = tuple((a.name[:MAX_NAME_CHARS], bool(a.required)) for a in (p.arguments or ())[:16])
                    listing.prompts.append(McpPromptInfo(p.name, (p.description or "")[:MAX_DESCRIPTION_CHARS], args))
        if caps is not None and caps.resources is not None:
            for r in (await session.list_resources()).resources[:MAX_RESOURCES]:
                listing.resources.append(McpResourceInfo(str(r.uri), r.name[:200], r.mime_type or ""))
        return listing, _notes(refused)

    def _fail(self, reason: str) -> None:
        self.state, self.error, self.pid = "failed", reason, None

    def _start_problem(self, exc: BaseException, timeout: float) -> str:
        inner = exc
        while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            inner = inner.exceptions[0]
        if isinstance(inner, TimeoutError):  # the start limit, seen through a task group
            return f"did not finish starting within {timeout:g} s"
        if isinstance(inner, FileNotFoundError) and self.config.command:
            return f"command {self.config.command!r} not found; check the path or install it"
        text = str(inner) or type(inner).__name__
        if "Connection closed" in text and self.config.command:
            last = last_words(self.name)
            hint = f" (its last words: {last})" if last else f" (see {log_path(self.name)})"
            return f"exited during start-up{hint}"
        if self.config.url and type(inner).__name__ in ("ConnectError", "ConnectTimeout"):
            return f"cannot connect to {self.config.url}: {text}"
        return f"could not start: {type(inner).__name__}: {text}"

    def alive(self) -> bool:
        """False when a stdio server's process has gone (noticed before the next call)."""
        if self.pid is None or self.state != "ready":
            return self.state == "ready"
        try:
            import psutil

            proc = psutil.Process(self.pid)
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except Exception:  # noqa: BLE001 - gone
            return False

    async def close(self) -> None:
        """Stop the server and wait for its process to end (bounded)."""
        task, stop = self._task, self._stop
        self._task = None
        if stop is not None:
            stop.set()
        if task is not None and not task.done() and self.state == "starting":
            task.cancel()  # stuck in its handshake: nothing to wind down politely
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except BaseException:  # noqa: BLE001 - its failure was recorded by _own
                pass
        self.state = "stopped" if self.state != "failed" else "failed"
        self.pid = None
        self._session = None

    # -- requests --------------------------------------------------------------------------
    async def request(self, what: str, make: Callable[[ClientSession], Awaitable[T]],
                      timeout: float | None = None) -> T:
        """Run one request on the session; every failure becomes an McpCallError."""
        if not await self.ensure_started():
            raise McpCallError(f"MCP server {self.name} is not available: {self.error}")
        session = self._session
        if session is None or not self.alive():
            self._crashed("its process has exited")
            raise McpCallError(f"MCP server {self.name} stopped before {what}; it restarts on the next call.")
        limit = timeout or float(self.config.timeout_s)
        self.active += 1
        started = time.monotonic()
        try:
            return await asyncio.wait_for(make(session), limit)
        except TimeoutError:
            raise McpCallError(f"{what[:1].upper()}{what[1:]} got no answer from MCP server {self.name} within "
                               f"{limit:g} s (its timeout_s); the call was abandoned.") from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - each kind below is a sentence
            problem = self._call_problem(what, exc, time.monotonic() - started)
            raise McpCallError(problem[:1].upper() + problem[1:]) from None
        finally:
            self.active -= 1

    def _crashed(self, reason: str) -> None:
        if self.state == "ready":
            self.state, self.error, self.pid = "crashed", reason, None
            if self._stop is not None:
                self._stop.set()  # the owner task tears the transport down

    def _call_problem(self, what: str, exc: Exception, elapsed: float) -> str:
        from mcp import MCPError
        from pydantic import ValidationError

        text = str(exc)
        if isinstance(exc, MCPError) and ("larger than" in text and "dropped unread" in text
                                          or "exceeded the" in text and "byte limit" in text):
            from core.tools.mcp.stdio import MAX_MESSAGE_BYTES

            return (f"MCP server {self.name} answered {what} with more than "
                    f"{MAX_MESSAGE_BYTES // 2**20} MiB; the answer was dropped unread and the call failed.")
        if isinstance(exc, MCPError) and "Connection closed" in text:
            self._crashed("the server stopped during a call")
            if self.state == "crashed":  # the status poll may have seen the exit first
                self.error = "the server stopped during a call"
            return (f"MCP server {self.name} stopped during {what} (after {elapsed:.1f} s); "
                    "nothing came back. It restarts on the next call.")
        if isinstance(exc, MCPError) and "timed out" in text:
            return f"{what} timed out on MCP server {self.name}."
        if isinstance(exc, MCPError):
            return f"MCP server {self.name} refused {what}: {text}"
        if isinstance(exc, ValidationError):
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(p) for p in first.get("loc", ())) or "result"
            return (f"MCP server {self.name} answered {what} with a malformed result "
                    f"({where}: {first.get('msg', text)}); the answer was discarded.")
        if isinstance(exc, RuntimeError) and "schema" in text.lower():
            return f"MCP server {self.name} answered {what} with a result that breaks its own schema: {text}"
        return f"{what} on MCP server {self.name} failed: {type(exc).__name__}: {text}"


def _import_sdk(stdio: bool) -> None:
    """Import what a start needs (in a worker thread; later imports are lookups)."""
    import anyio  # noqa: F401
    import mcp  # noqa: F401
    import mcp.client.session  # noqa: F401

    if stdio:
        import core.tools.mcp.stdio  # noqa: F401
    else:
        import mcp.client.streamable_http  # noqa: F401

        import core.tools.mcp.http_limits  # noqa: F401


def _schema_problem(schema: Any) -> str | None:
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return "its input schema is not JSON"
    return f"its input schema is over {MAX_SCHEMA_CHARS // 1024} KiB" if size > MAX_SCHEMA_CHARS else None


def _notes(refused: dict[str, list[str]]) -> list[str]:
    """One sentence per kind of refusal, naming the first few."""
    notes = list(refused.pop("over", []))
    for kind, items in refused.items():
        shown = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
        notes.append(f"refused {len(items)} {kind}(s) with unusable names or schemas: {shown}")
    return notes
