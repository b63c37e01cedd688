"""Tools the model can call: a name, a JSON-schema for the arguments, and a runner.

The registry hands the schemas to the chat template (OpenAI "function" shape, which
every tool-aware template reads) and checks a call's arguments before anything runs, so
a model's malformed call becomes a clear tool result instead of an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from core.store import Store
    from core.tools.sandbox import Sandbox

T = TypeVar("T")
StoreCall = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's answer: `text` goes to the model; `ok` False marks the card as failed."""

    text: str
    ok: bool = True
    figures: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolContext:
    """What a running tool may use. `store_call(fn, *args)` runs fn on the store thread."""

    conversation_id: str
    store: Store | None = None
    store_call: StoreCall | None = None
    sandbox: Sandbox | None = None


Runner = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool. `read_only` tools may be "always allowed" per conversation, and
    so may tools of an MCP server (`server` names it; None for the built-ins): the person
    configured that server and says per tool whether to stop asking."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Runner
    read_only: bool = False
    server: str | None = None

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters,
        }}


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """The first problem with `arguments` against the tool's schema, as a sentence, or None.

    Covers what models get wrong (missing, unknown or mistyped top-level fields); nested
    schemas are left to the tool.
    """
    props: dict[str, Any] = tool.parameters.get("properties", {})
    for name in tool.parameters.get("required", []):
        if name not in arguments:
            return f"{tool.name} needs the argument {name!r}."
    for name, value in arguments.items():
        spec = props.get(name)
        if spec is None:
            if tool.parameters.get("additionalProperties", True) is False:
                known = ", ".join(props) or "none"
                return f"{tool.name} has no argument {name!r} (known: {known})."
            continue
        kind = spec.get("type")
        types = _TYPES.get(kind) if isinstance(kind, str) else None
        if types is None:
            continue
        bad_bool = isinstance(value, bool) and kind in ("integer", "number")
        if not isinstance(value, types) or bad_bool:
            return f"{tool.name}: argument {name!r} must be {kind}, got {type(value).__name__}."
        if "enum" in spec and value not in spec["enum"]:
            return f"{tool.name}: argument {name!r} must be one of {spec['enum']}."
    return None


class ToolRegistry:
    """The tools offered to the model, by name."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def replace_server(self, server: str, tools: list[Tool]) -> None:
        """Swap the tools of one MCP server (none: it stopped or was turned off). A tool
        whose name is taken by another source is skipped, never shadowing it."""
        for name in [n for n, t in self._tools.items() if t.server == server]:
            del self._tools[name]
        for tool in tools:
            if tool.name not in self._tools:
                self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> tuple[dict[str, Any], ...]:
        """What GenerationRequest.tools carries to the chat template."""
        return tuple(t.schema() for t in self._tools.values())

    async def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run a tool; unknown tools, bad arguments and tool bugs come back as failed results."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return ToolResult(f"There is no tool named {name!r}. Available tools: {known}.", ok=False)
        problem = check_arguments(tool, arguments)
        if problem:
            return ToolResult(problem, ok=False)
        try:
            return await tool.run(arguments, ctx)
        except Exception as exc:  # a tool bug must not end the turn; the model sees it
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", ok=False)
