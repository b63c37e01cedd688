"""`search_conversations`: full-text search over the user's saved chats (the FTS store)."""

from __future__ import annotations

from typing import Any

from core.store import HIGHLIGHT_END, HIGHLIGHT_START
from core.tools.registry import Tool, ToolContext, ToolResult

MAX_HITS = 20


async def _run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.store is None or ctx.store_call is None:
        return ToolResult("Conversation history is not available here.", ok=False)
    query = str(arguments["query"]).strip()
    if not query:
        return ToolResult("search_conversations needs a non-empty query.", ok=False)
    limit = max(1, min(int(arguments.get("limit", 5)), MAX_HITS))
    hits = await ctx.store_call(ctx.store.search, query, limit)
    if not hits:
        return ToolResult(f"No saved conversation matches {query!r}.")
    lines = [f"{len(hits)} conversation(s) match {query!r}:"]
    for hit in hits:
        snippet = hit.snippet.replace(HIGHLIGHT_START, "**").replace(HIGHLIGHT_END, "**")
        here = " (this conversation)" if hit.conversation_id == ctx.conversation_id else ""
        lines.append(f"- {hit.title or 'Untitled'}{here}: {snippet}")
    return ToolResult("\n".join(lines), data={"ids": [h.conversation_id for h in hits]})


TOOL = Tool(
    name="search_conversations",
    description="Search the user's saved conversations by keywords; returns titles and matching snippets.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "description": "Most conversations to return (default 5)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    run=_run,
    read_only=True,
)
