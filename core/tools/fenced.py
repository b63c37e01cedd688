"""Fenced Python blocks in a message, run from the keyboard, and the "fix" prompt.

The user (not the model) starts these runs, so they skip approval; they still leave a
visible record: a stored `tool` message with origin "user".
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from core.tools.sandbox import RunResult
from core.wire.tools import PYTHON_TAGS, BlockRun, fix_prompt, python_blocks  # noqa: F401

if TYPE_CHECKING:
    from core.store import Store

def run_record(code: str, result: RunResult) -> dict[str, Any]:
    """The stored tool_results entry of a keyboard run."""
    return {"id": f"run-{uuid.uuid4().hex[:10]}", "name": "python", "arguments": {"code": code},
            "state": "done" if result.ok else "failed", "content": result.text(),
            "figures": list(result.figures), "origin": "user"}




async def run_block(runtime: Any, conversation_id: str, code: str) -> BlockRun:
    """Run a block in the conversation's sandbox namespace and store the record."""
    result: RunResult = await runtime.tools.sandbox.run(conversation_id, code)
    record = run_record(code, result)
    store: Store = runtime.store_handle
    content = f"[python: {record['state']}]\n{record['content']}"
    message_id = await runtime.store_call(
        store.add_message, conversation_id, "tool", content, tool_results=[record])
    return BlockRun(result, record, message_id)
