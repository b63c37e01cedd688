"""The built-in tools, one module each; `default_registry()` offers them all."""

from core.tools.builtins import now, python, read_document, search_conversations
from core.tools.registry import Tool, ToolRegistry

BUILTIN_TOOLS: tuple[Tool, ...] = (
    python.TOOL, search_conversations.TOOL, read_document.TOOL, now.TOOL,
)


def default_registry() -> ToolRegistry:
    return ToolRegistry(list(BUILTIN_TOOLS))


__all__ = ["BUILTIN_TOOLS", "default_registry"]
