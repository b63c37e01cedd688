"""ToolKit: the tools, the approval policy and the sandbox the runtime holds.

A conversation's sandbox starts on its first python run, never at app start, so a chat
that uses no tools costs nothing; each conversation gets its own (Sandbox keeps at most
MAX_LIVE alive and closes them all at shutdown).
"""

from __future__ import annotations

from typing import Any

from core.tools.approval import ApprovalPolicy
from core.tools.builtins import default_registry
from core.tools.registry import StoreCall, ToolContext, ToolRegistry
from core.tools.sandbox import DEFAULT_SCRATCH_MB, Sandbox

NO_TOOL_FAMILIES = frozenset({"plain"})
# How long a turn waits for MCP servers starting on first use; a slower one keeps starting
# and its tools join the next turn (its state shows in the F4 pane meanwhile).
MCP_START_WAIT_S = 8.0


class ToolKit:
    """Registry + policy + sandbox; `offer(model_info)` says which schemas a model gets.

    Built from settings, it follows later changes to them (the settings screen edits the
    same object): tools on/off and the python prompt at once, the sandbox's timeout and
    memory total at the next run, its per-process and scratch limits when a sandbox is
    next started.
    """

    def __init__(self, *, enabled: bool = True, python_asks: bool = True,
                 python_timeout_s: float = 30.0, python_memory_mb: int = 1024,
                 python_scratch_mb: int = DEFAULT_SCRATCH_MB,
                 registry: ToolRegistry | None = None, settings: Any = None) -> None:
        self._settings = settings
        self._enabled = enabled
        self.registry = registry or default_registry()
        self.sandbox = Sandbox(timeout_s=python_timeout_s, memory_mb=python_memory_mb,
                               scratch_mb=python_scratch_mb)
        self.policy = ApprovalPolicy(self.registry, python_asks=python_asks,
                                     unwalled=self.sandbox.unwalled)
        from core.tools.mcp import McpServers  # imports the SDK only when a server starts

        self.mcp = McpServers(self.registry, list(getattr(settings, "mcp_servers", None) or []))

    @classmethod
    def from_settings(cls, settings: Any) -> ToolKit:
        return cls(
            enabled=getattr(settings, "tools_enabled", True),
            python_asks=getattr(settings, "python_asks", True),
            python_timeout_s=float(getattr(settings, "python_timeout_s", 30.0)),
            python_memory_mb=int(getattr(settings, "python_memory_mb", 1024)),
            python_scratch_mb=int(getattr(settings, "python_scratch_mb", DEFAULT_SCRATCH_MB)),
            settings=settings,
        )

    @property
    def enabled(self) -> bool:
        return bool(getattr(self._settings, "tools_enabled", self._enabled))

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._enabled = value
        if self._settings is not None:
            self._settings.tools_enabled = value

    def sync(self) -> None:
        """Pick up settings changed since the last turn."""
        s = self._settings
        if s is None:
            return
        self.policy.python_asks = bool(s.python_asks)
        self.sandbox.timeout_s = float(s.python_timeout_s)
        self.sandbox.memory_mb = int(s.python_memory_mb)
        self.sandbox.scratch_mb = int(getattr(s, "python_scratch_mb", self.sandbox.scratch_mb))
        self.mcp.sync(list(getattr(s, "mcp_servers", None) or []))

    async def prepare(self, model_info: dict[str, Any]) -> None:
        """Before tools are offered: start the MCP servers not running yet (first use)."""
        self.sync()
        if self.enabled and model_info.get("family", "plain") not in NO_TOOL_FAMILIES:
            await self.mcp.ensure_started(wait=MCP_START_WAIT_S)

    def offer(self, model_info: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """Tool schemas for this model: none when tools are off or its output format has
        no tool-call markup we can parse (the calls would show up as plain text)."""
        self.sync()
        if not self.enabled or model_info.get("family", "plain") in NO_TOOL_FAMILIES:
            return ()
        return self.registry.schemas()

    def context(self, conversation_id: str, *, store: Any = None,
                store_call: StoreCall | None = None) -> ToolContext:
        return ToolContext(conversation_id, store=store, store_call=store_call, sandbox=self.sandbox)

    async def close(self) -> None:
        await self.mcp.close()
        await self.sandbox.close()
