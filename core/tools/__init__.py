"""Tools the model can call: registry (JSON-schema tools), approval, the turn's tool
loop, the Python sandbox worker and the built-in tools.

    kit = ToolKit()                                # runtime.tools
    kit.offer(model_info)                          # schemas for GenerationRequest.tools
    ToolRunner(kit.registry, kit.policy, ctx, approve).run(calls)  # -> ToolStatus events
    await kit.sandbox.run(conversation_id, code)   # RunResult (stdout, value, figures, error)
    python_blocks(markdown) / fix_prompt(code, result)   # run fenced code from the keyboard
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.tools.approval import ApprovalPolicy, Approver, Decision
from core.tools.fenced import fix_prompt, python_blocks, run_block
from core.tools.kit import ToolKit
from core.tools.loop import DENIED, MAX_ROUNDS, ToolRunner, ToolState, ToolStatus, chat_messages
from core.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult
from core.tools.sandbox import RunResult, Sandbox

if TYPE_CHECKING:
    from core.tools.mcp import McpCallError

__all__ = [
    "DENIED",
    "McpCallError",
    "MAX_ROUNDS",
    "ApprovalPolicy",
    "Approver",
    "Decision",
    "RunResult",
    "Sandbox",
    "Tool",
    "ToolContext",
    "ToolKit",
    "ToolRegistry",
    "ToolResult",
    "ToolRunner",
    "ToolState",
    "ToolStatus",
    "chat_messages",
    "fix_prompt",
    "python_blocks",
    "run_block",
]


def __getattr__(name: str) -> Any:
    """MCP names load only when asked (PEP 562): most runs never start an MCP server."""
    if name == "McpCallError":
        from core.tools.mcp import McpCallError

        return McpCallError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
