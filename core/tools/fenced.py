"""Fenced Python blocks in a message, run from the keyboard, and the "fix" prompt.

The user (not the model) starts these runs, so they skip approval; they still leave a
visible record: a stored `tool` message with origin "user".
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.tools.sandbox import RunResult

if TYPE_CHECKING:
    from core.store import Store

PYTHON_TAGS = frozenset({"python", "py", "python3", "pycon", "ipython"})
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


def python_blocks(markdown: str) -> list[str]:
    """The code of every fenced block tagged as Python, in order (unclosed ones too:
    a reply cut off mid-block still has runnable code)."""
    blocks: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip().split()
        lang = info[0].lower() if info else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[i])
            i += 1
        i += 1
        if lang in PYTHON_TAGS:
            blocks.append("\n".join(body))
    return blocks


def fix_prompt(code: str, result: RunResult | str) -> str:
    """What the "fix" action puts in the composer: the code and what went wrong."""
    error = result if isinstance(result, str) else (result.error or result.text())
    return (
        "This code failed:\n\n```python\n" + code.rstrip("\n") + "\n```\n\n"
        "```\n" + error.rstrip("\n") + "\n```\n\nPlease fix it."
    )


def run_record(code: str, result: RunResult) -> dict[str, Any]:
    """The stored tool_results entry of a keyboard run."""
    return {"id": f"run-{uuid.uuid4().hex[:10]}", "name": "python", "arguments": {"code": code},
            "state": "done" if result.ok else "failed", "content": result.text(),
            "figures": list(result.figures), "origin": "user"}


@dataclass(frozen=True, slots=True)
class BlockRun:
    """A keyboard run: the sandbox's result, the stored record and its message id."""

    result: RunResult
    record: dict[str, Any]
    message_id: str


async def run_block(runtime: Any, conversation_id: str, code: str) -> BlockRun:
    """Run a block in the conversation's sandbox namespace and store the record."""
    result: RunResult = await runtime.tools.sandbox.run(conversation_id, code)
    record = run_record(code, result)
    store: Store = runtime.store_handle
    content = f"[python: {record['state']}]\n{record['content']}"
    message_id = await runtime.store_call(
        store.add_message, conversation_id, "tool", content, tool_results=[record])
    return BlockRun(result, record, message_id)
