"""`read_document`: read the text of a document attached to this conversation."""

from __future__ import annotations

from typing import Any

from core.tools.registry import Tool, ToolContext, ToolResult

DEFAULT_CHARS = 4000
MAX_CHARS = 20_000


def _norm(alias: str) -> str:
    return alias.strip().lstrip("@").lower()


async def _run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.store is None or ctx.store_call is None:
        return ToolResult("Attached documents are not available here.", ok=False)
    docs = await ctx.store_call(ctx.store.attachments, ctx.conversation_id)
    if not docs:
        return ToolResult(
            "No documents are attached to this conversation. Ask the user to attach one "
            "first (then it can be read by name).", ok=False)
    names = ", ".join(d.alias for d in docs)
    name = arguments.get("name")
    if name is None:
        if len(docs) > 1:
            return ToolResult(f"Several documents are attached: {names}. Call read_document "
                              "again with `name` set to one of them.", ok=False)
        doc = docs[0]
    else:
        matches = [d for d in docs if _norm(d.alias) == _norm(str(name))]
        if not matches:
            return ToolResult(f"No attached document is named {name!r}. Attached: {names}.", ok=False)
        doc = matches[0]
    offset = max(0, int(arguments.get("offset", 0)))
    size = max(1, min(int(arguments.get("max_chars", DEFAULT_CHARS)), MAX_CHARS))
    total = len(doc.text)
    if total == 0:
        return ToolResult(f"{doc.alias} has no extractable text.", ok=False)
    if offset >= total:
        return ToolResult(f"{doc.alias} has only {total} characters; offset {offset} is past the end.",
                          ok=False)
    end = min(total, offset + size)
    header = f"{doc.alias} (characters {offset}–{end} of {total})"
    more = f"\n… more: call read_document with offset={end}." if end < total else ""
    return ToolResult(f"{header}\n\n{doc.text[offset:end]}{more}")


TOOL = Tool(
    name="read_document",
    description="Read the text of a document the user attached to this conversation.",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The document's name (needed when several are attached)."},
            "offset": {"type": "integer", "description": "Character to start at (default 0)."},
            "max_chars": {"type": "integer", "description": f"How much to read (default {DEFAULT_CHARS})."},
        },
        "additionalProperties": False,
    },
    run=_run,
    read_only=True,
)
