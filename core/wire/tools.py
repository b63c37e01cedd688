"""The tools' plain data as the UI shows it: a tool call's progress, a Python run's
result, a keyboard run's record, an MCP call's error, and the fenced Python blocks of a
message with the "fix" prompt built from a failed run.

The running (approval, the loop, the sandbox, MCP servers) stays in core.tools, which
imports these from here and keeps them in its face.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from core.events import ToolCall

ToolState = Literal["awaiting-approval", "running", "done", "failed", "denied"]
FINAL_STATES = frozenset({"done", "failed", "denied"})


@dataclass(frozen=True, slots=True)
class ToolStatus:
    """A tool call's progress, streamed by Turn.events between generations. The last
    status of a call (done, failed or denied) carries the result the model will read."""

    call: ToolCall
    state: ToolState
    result: str = ""
    figures: tuple[str, ...] = ()

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def record(self) -> dict[str, Any]:
        """The stored form (messages.tool_results), one per call."""
        return {"id": self.call.id, "name": self.call.name, "arguments": self.call.arguments,
                "state": self.state, "content": self.result, "figures": list(self.figures)}


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced. `kind` says why it failed: exception | timeout | memory |
    crashed | cancelled; `reset` is True when the run cost the conversation its variables."""

    ok: bool
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None
    kind: str | None = None
    figures: tuple[str, ...] = ()
    reset: bool = False
    pid: int | None = field(default=None, compare=False)
    note: str | None = None  # what the sandbox stopped after the run (processes, threads)

    def text(self) -> str:
        """The result as the model (and the tool card) reads it, like a notebook cell's output."""
        parts: list[str] = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.value is not None:
            parts.append(self.value)
        for path in self.figures:
            parts.append(f"[figure saved: {path}]")
        if self.error:
            parts.append(self.error)
        if self.note:
            parts.append(self.note)
        if self.reset:
            parts.append("(The Python session was restarted; variables from earlier runs are gone.)")
        return "\n".join(parts) if parts else "(no output)"


class McpCallError(Exception):
    """A call that did not get a usable answer; str() is the sentence for the tool card."""


@dataclass(frozen=True, slots=True)
class BlockRun:
    """A keyboard run: the sandbox's result, the stored record and its message id."""

    result: RunResult
    record: dict[str, Any]
    message_id: str


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
