"""`python`: run code in the conversation's own sandbox; its variables last the conversation."""

from __future__ import annotations

from typing import Any

from core.tools.registry import Tool, ToolContext, ToolResult


async def _run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.sandbox is None:
        return ToolResult("The Python sandbox is not available here.", ok=False)
    result = await ctx.sandbox.run(ctx.conversation_id, str(arguments["code"]))
    return ToolResult(result.text(), ok=result.ok, figures=result.figures,
                      data={"kind": result.kind, "reset": result.reset})


TOOL = Tool(
    name="python",
    description=(
        "Run Python code in a persistent session (variables survive between calls). "
        "Prints, the last expression's value and matplotlib figures are returned."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run."}},
        "required": ["code"],
        "additionalProperties": False,
    },
    run=_run,
    read_only=False,
)
