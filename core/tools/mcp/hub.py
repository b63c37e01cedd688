"""McpServers: the configured MCP servers as one more source of tools for the registry.

Servers start on first use (the first turn that offers tools, or a `/` typed in the
composer for their prompts), never at app start. Each server's tools join the registry as
`server.tool`, checked against their JSON schema before a call goes out; prompts become
slash commands and resources can be saved to a file and attached like one.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.terminal_text import visible
from core.tools.mcp.connection import START_TIMEOUT_S, McpCallError, McpConnection, McpToolInfo
from core.tools.mcp.results import resource_file, resource_uri_problem, to_tool_result
from core.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult

MAX_PROMPT_CHARS = 100_000

if TYPE_CHECKING:
    from core.config import McpServerConfig
    from core.workers.pool import WorkerStatus


def schema_problem(name: str, schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """The first way `arguments` break the tool's JSON schema, as a sentence, or None
    (a server whose schema is itself invalid gets its arguments unchecked)."""
    import jsonschema

    try:
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{name}: arguments do not fit its schema{f' at {where}' if where else ''}: {error.message}"


class McpServers:
    """Connections by server name, kept in step with settings.mcp_servers."""

    def __init__(self, registry: ToolRegistry, configs: list[McpServerConfig] | None = None, *,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.registry = registry
        self.start_timeout_s = start_timeout_s
        self.connections: dict[str, McpConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._starting: asyncio.Task[None] | None = None
        self._start_tasks: dict[str, asyncio.Task[None]] = {}
        self.sync(configs or [])

    # -- configuration ----------------------------------------------------------------------
    def sync(self, configs: list[McpServerConfig]) -> None:
        """Follow the settings: removed, turned-off or edited servers stop (in the
        background) and lose their tools; new ones wait for first use."""
        wanted = {c.name: c for c in configs if c.enabled and c.problem() is None}
        for name, conn in list(self.connections.items()):
            if wanted.get(name) != conn.config:
                del self.connections[name]
                self.registry.replace_server(name, [])
                self._close_soon(conn)
        for name, config in wanted.items():
            if name not in self.connections:
                self.connections[name] = McpConnection(_copy(config), self.start_timeout_s)

    def _close_soon(self, conn: McpConnection) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # never started (no loop ever ran it), nothing to stop
        task = loop.create_task(conn.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- starting ---------------------------------------------------------------------------
    async def ensure_started(self, wait: float | None = None) -> None:
        """Start every enabled server not running yet, together; register their tools.

        `wait` bounds how long the caller waits (a turn should not sit behind a slow
        server); the starts go on and their tools join when ready."""
        pending = [c for c in self.connections.values() if c.state in ("stopped", "crashed")]
        starting = [self._start_tasks.get(c.name) for c in self.connections.values()
                    if c.state == "starting"]
        for conn in pending:
            task = asyncio.ensure_future(self._start(conn))
            self._start_tasks[conn.name] = task
            task.add_done_callback(lambda _t, n=conn.name: self._start_tasks.pop(n, None))
            starting.append(task)
        tasks = [t for t in starting if t is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=wait)

    async def _start(self, conn: McpConnection) -> None:
        ok = await conn.ensure_started()
        if self.connections.get(conn.name) is not conn:
            return  # removed while it started
        self.registry.replace_server(conn.name, [self._tool(conn, t) for t in conn.listing.tools] if ok else [])

    def start_soon(self) -> asyncio.Task[None] | None:
        """Start servers in the background (a `/` typed: their prompts will be wanted);
        the task when one was started now."""
        if self._starting is None or self._starting.done():
            if any(c.state == "stopped" for c in self.connections.values()):
                self._starting = asyncio.ensure_future(self.ensure_started())
                return self._starting
        return None

    def _tool(self, conn: McpConnection, info: McpToolInfo) -> Tool:
        full = f"{conn.name}.{info.name}"

        async def run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
            problem = schema_problem(full, info.schema, arguments)
            if problem:
                return ToolResult(problem, ok=False)
            try:
                result = await conn.request(
                    f"the call to {full}", lambda s: s.call_tool(info.name, arguments))
            except McpCallError as exc:  # a crashed server keeps its tools: the next call restarts it
                if conn.state == "failed":
                    self.registry.replace_server(conn.name, [])
                return ToolResult(str(exc), ok=False)
            return await asyncio.to_thread(to_tool_result, conn.name, result, info.name)

        schema = info.schema if info.schema.get("type") == "object" else {"type": "object", "properties": {}}
        return Tool(full, info.description, schema, run, read_only=info.read_only, server=conn.name)

    # -- prompts and resources ------------------------------------------------------------------
    def prompt_commands(self) -> dict[str, str]:
        """`/server.prompt` -> what the slash hint shows, for every ready server's prompts."""
        out: dict[str, str] = {}
        for conn in self.connections.values():
            if conn.state != "ready":
                continue
            for p in conn.listing.prompts:
                args = " ".join(a.upper() if req else f"[{a.upper()}]" for a, req in p.arguments)
                out[f"/{conn.name}.{p.name}"] = " ".join(x for x in (args, p.description) if x) or "MCP prompt"
        return out

    async def get_prompt(self, command: str, argument: str) -> str:
        """The text of `/server.prompt ARGUMENT`; a prompt with one argument takes the whole
        text, several take key=value words. Raises McpCallError with the reason."""
        import shlex

        server, _, name = command.lstrip("/").partition(".")
        conn = self.connections.get(server)
        prompt = next((p for p in conn.listing.prompts if p.name == name), None) if conn else None
        if conn is None or prompt is None:
            raise McpCallError(f"No MCP prompt {command}.")
        values: dict[str, str] = {}
        if len(prompt.arguments) == 1 and argument:
            values[prompt.arguments[0][0]] = argument
        elif argument:
            try:
                words = shlex.split(argument)
            except ValueError:
                words = argument.split()
            for word in words:
                key, eq, value = word.partition("=")
                if not eq:
                    raise McpCallError(f"{command} takes key=value arguments: "
                                       + " ".join(f"{a}=…" for a, _ in prompt.arguments))
                values[key] = value
        missing = [a for a, required in prompt.arguments if required and a not in values]
        if missing:
            usage = " ".join(a.upper() for a, _ in prompt.arguments)
            raise McpCallError(f"{command} needs {', '.join(missing)}: {command} {usage}")
        result = await conn.request(f"the prompt {command}", lambda s: s.get_prompt(name, values))
        texts = [m.content.text for m in result.messages if getattr(m.content, "type", "") == "text"]
        if not texts:
            raise McpCallError(f"{command} returned no text.")
        text = "\n\n".join(texts)
        if len(text) > MAX_PROMPT_CHARS:  # it goes into the composer, to be read and edited
            raise McpCallError(f"{command} returned {len(text):,} characters, more than the "
                               f"{MAX_PROMPT_CHARS:,} a prompt may bring; it was not used.")
        return text

    def resources(self) -> list[tuple[str, str, str]]:
        """(server, uri, name) of every ready server's resources."""
        return [(c.name, r.uri, r.name) for c in self.connections.values() if c.state == "ready"
                for r in c.listing.resources]

    async def save_resource(self, server: str, uri: str) -> Path:
        """Read a resource into a file under the data dir, to attach like any document."""
        conn = self.connections.get(server)
        if conn is None:
            known = ", ".join(self.connections) or "none is configured"
            raise McpCallError(f"No MCP server named {server!r} ({known}).")
        if problem := resource_uri_problem(uri):
            raise McpCallError(f"Refused to attach {visible(uri[:200])!r} from {server}: {problem}.")
        result = await conn.request(f"reading {uri}", lambda s: s.read_resource(uri))
        name = next((r.name for r in conn.listing.resources if r.uri == uri), "") or uri.rsplit("/", 1)[-1]
        try:
            return await asyncio.to_thread(resource_file, server, name, list(result.contents))
        except (OSError, ValueError) as exc:
            raise McpCallError(f"Could not save {uri} from {server}: {exc}") from None

    # -- status and shutdown ---------------------------------------------------------------------
    def status(self) -> list[WorkerStatus]:
        """Rows for the F4 pane and `llmdeck workers`, beside the model workers."""
        from core.workers.pool import WorkerStatus

        rows = []
        for conn in self.connections.values():
            if conn.state == "ready" and not conn.alive():
                conn._crashed("its process has exited")  # noqa: SLF001 - noticed here first
            tools = len(conn.listing.tools) if conn.state == "ready" else 0
            state = {"stopped": "idle", "ready": "ready"}.get(conn.state, conn.state)
            rss = 0
            if conn.pid is not None:
                with contextlib.suppress(Exception):
                    import psutil

                    rss = psutil.Process(conn.pid).memory_info().rss
            rows.append(WorkerStatus(
                worker_id=f"mcp:{conn.name}",
                model=f"mcp {conn.name} · {tools} tools" if conn.state == "ready" else f"mcp {conn.name}",
                engine="mcp", state=state, pid=conn.pid, rss_bytes=rss, active=conn.active,
                queued=0, tokens_per_s=0.0, restarts=conn.restarts,
                error=conn.error or ("; ".join(conn.notes) if conn.state == "ready" and conn.notes else None)))
        return rows

    async def close(self) -> None:
        """Stop every server (quitting leaves none behind)."""
        conns = list(self.connections.values())
        self.connections.clear()
        for task in [self._starting, *self._start_tasks.values()]:
            if task is not None and not task.done():
                task.cancel()
        await asyncio.gather(*(c.close() for c in conns), *self._closing, return_exceptions=True)


def _copy(config: McpServerConfig) -> McpServerConfig:
    from dataclasses import replace

    return replace(config, args=list(config.args), env=dict(config.env), headers=dict(config.headers))
