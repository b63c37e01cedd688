"""Who decides whether a tool call runs: the user, asked through an approval callback.

Every call asks, except read-only and MCP tools the user has "always allowed" in this
conversation, and `python` when the user turned its prompt off in settings, unless the
sandbox has no walls (turned off, or impossible here): then the code would run with the
person's full rights, so python asks before every run whatever the setting, and
`warning` gives the dialog the sentence that says so. A call that nobody can be asked
about is denied: nothing runs unseen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from core.events import ToolCall
from core.tools.registry import ToolRegistry

Decision = Literal["allow", "deny", "always"]
"""allow: run this call; deny: don't; always: run it and stop asking for this tool in
this conversation (read-only and MCP tools only; for others it means allow)."""

Approver = Callable[[ToolCall], Awaitable[Decision]]


class ApprovalPolicy:
    """Per-conversation memory of "always allow", plus the python setting."""

    def __init__(self, registry: ToolRegistry, *, python_asks: bool = True,
                 unwalled: Callable[[], str | None] | None = None) -> None:
        self.registry = registry
        self.python_asks = python_asks
        self.unwalled = unwalled or (lambda: None)  # the sandbox's "no walls" sentence
        self._always: dict[str, set[str]] = {}

    def warning(self, name: str) -> str | None:
        """What the approval dialog must say before this tool runs, beyond its arguments:
        for python without the sandbox's walls, that it runs with the person's full rights."""
        return self.unwalled() if name == "python" else None

    def can_always_allow(self, name: str) -> bool:
        tool = self.registry.get(name)
        return tool is not None and (tool.read_only or tool.server is not None)

    def needs_approval(self, conversation_id: str, name: str) -> bool:
        tool = self.registry.get(name)
        if tool is None:
            return False  # nothing runs: the call fails with "no such tool"
        if name == "python":
            return self.python_asks or self.unwalled() is not None
        if self.can_always_allow(name):
            return name not in self._always.get(conversation_id, set())
        return True

    def remember(self, conversation_id: str, name: str, decision: Decision) -> None:
        if decision == "always" and self.can_always_allow(name):
            self._always.setdefault(conversation_id, set()).add(name)

    def always_allowed(self, conversation_id: str) -> frozenset[str]:
        return frozenset(self._always.get(conversation_id, ()))

    def forget(self, conversation_id: str) -> None:
        self._always.pop(conversation_id, None)
