"""The tool loop between two generations: approve, run and record each tool call.

A turn ends a generation with ToolCall events; this module turns those into ToolStatus
events the UI shows as cards (awaiting-approval, running, done, failed, denied), asks the
approval callback, runs the tool, and builds the messages the next generation sees. The
runtime's Turn owns the rounds (bounded by MAX_ROUNDS) and storing; this module owns
what happens to each call, so it can be tested without a model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from core.events import ToolCall
from core.tools.approval import ApprovalPolicy, Approver
from core.tools.registry import ToolContext, ToolRegistry
from core.wire.tools import FINAL_STATES, ToolState, ToolStatus  # noqa: F401  (the loop's names)

if TYPE_CHECKING:
    from core.store import Message

DENIED = "denied by user"
CANCELLED = "cancelled by user"
MAX_ROUNDS = 8




class ToolRunner:
    """Runs one round of calls; `cancel()` stops a waiting approval or a running tool."""

    def __init__(self, registry: ToolRegistry, policy: ApprovalPolicy, ctx: ToolContext,
                 approve: Approver | None) -> None:
        self.registry = registry
        self.policy = policy
        self.ctx = ctx
        self.approve = approve
        self.cancelled = False
        self._current: asyncio.Future[Any] | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self._current is not None and not self._current.done():
            self._current.cancel()

    async def _await(self, make: Callable[[], Any]) -> tuple[bool, Any]:
        """(True, value), or (False, None) when our own cancel() stopped it."""
        if self.cancelled:
            return False, None
        self._current = asyncio.ensure_future(make())
        try:
            return True, await self._current
        except asyncio.CancelledError:
            if self.cancelled:
                return False, None
            raise
        finally:
            self._current = None

    async def run(self, calls: list[ToolCall]) -> AsyncIterator[ToolStatus]:
        cid = self.ctx.conversation_id
        for call in calls:
            if self.cancelled:
                yield ToolStatus(call, "denied", CANCELLED)
                continue
            if call.error:
                yield ToolStatus(call, "failed", f"The tool call could not be read: {call.error}")
                continue
            if self.policy.needs_approval(cid, call.name):
                yield ToolStatus(call, "awaiting-approval")
                if self.approve is None:
                    yield ToolStatus(call, "denied", DENIED)
                    continue
                approve = self.approve
                finished, decision = await self._await(lambda c=call, a=approve: a(c))
                if not finished:
                    yield ToolStatus(call, "denied", CANCELLED)
                    continue
                self.policy.remember(cid, call.name, decision)
                if decision not in ("allow", "always"):
                    yield ToolStatus(call, "denied", DENIED)
                    continue
            yield ToolStatus(call, "running")
            finished, result = await self._await(
                lambda c=call: self.registry.call(c.name, dict(c.arguments), self.ctx))
            if not finished:
                yield ToolStatus(call, "failed", CANCELLED)
                continue
            yield ToolStatus(call, "done" if result.ok else "failed", result.text, result.figures)


def limit_statuses(calls: list[ToolCall], rounds: int) -> list[ToolStatus]:
    """What calls past the round limit get instead of running (still shown and stored)."""
    text = (f"not run: the model asked for tools {rounds} times in one reply, the limit; "
            "send a new message to continue")
    return [ToolStatus(call, "failed", text) for call in calls]


# -- messages the chat template reads ------------------------------------------------------

def assistant_message(text: str, calls: list[ToolCall] | list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant turn with its tool calls in the OpenAI shape tool-aware templates read."""
    items = [c if isinstance(c, dict) else {"id": c.id, "name": c.name, "arguments": c.arguments}
             for c in calls]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if items:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c.get("arguments") or {}}}
            for c in items
        ]
    return message


def tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def tool_results_text(statuses: list[ToolStatus]) -> str:
    """The stored tool message's content: searchable, and readable in an export."""
    return "\n\n".join(f"[{s.call.name}: {s.state}]\n{s.result}" for s in statuses)


def chat_messages(history: list[Message]) -> list[dict[str, Any]]:
    """Stored messages as chat-template messages, tool calls and results included.

    A tool result is sent only after the assistant message that asked for it; results of
    runs the user started from the keyboard stay out of the prompt (templates reject a
    tool message that answers no call).
    """
    out: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for m in history:
        if m.role == "tool":
            for r in m.tool_results or []:
                if isinstance(r, dict) and r.get("id") in open_calls:
                    out.append(tool_message(r["id"], r.get("name", ""), str(r.get("content", ""))))
            continue
        if m.role == "assistant" and m.tool_calls:
            calls = [c for c in m.tool_calls if isinstance(c, dict) and "id" in c and "name" in c]
            open_calls = {c["id"] for c in calls}
            out.append(assistant_message(m.content, calls))
            continue
        open_calls = set()
        if m.role in ("user", "assistant", "system") and (m.content or m.role == "user"):
            out.append({"role": m.role, "content": m.content})
    return out


def arguments_text(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)
