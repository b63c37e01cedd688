"""The tool round: what happens between two generations of one reply.

A generation that ended with tool calls hands them here: each call is shown (ToolStatus),
approved, run, images it returned are attached to the conversation, the results are stored
as one `tool` message, and the follow-up messages for the next generation are built. At the
last allowed round the calls are refused with a status instead of run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from core.events import ToolCall
from core.runtime.store_thread import StoreThread
from core.tools import Approver, ToolKit, ToolRunner, ToolStatus
from core.tools.loop import assistant_message, limit_statuses, tool_message, tool_results_text

if TYPE_CHECKING:
    from core.vision import AttachedImage


class ToolImages(Protocol):
    """What the round needs of the chat context for images a tool returned."""

    async def attach_tool_images(self, conversation_id: str,
                                 paths: Sequence[str]) -> list[AttachedImage]: ...

    async def tool_images_text(self, images: Sequence[AttachedImage]) -> str | None: ...


class ToolRound:
    """One round of tool calls for one conversation; `cancel` stops a call that runs."""

    def __init__(self, tools: ToolKit, store: StoreThread, images: ToolImages,
                 conversation_id: str, approve: Approver | None) -> None:
        self._tools = tools
        self._store = store
        self._images = images
        self._conversation_id = conversation_id
        self._approve = approve
        self._runner: ToolRunner | None = None
        self.statuses: list[ToolStatus] = []  # the final status of each call, in order
        self._shown: dict[str, list[AttachedImage]] = {}  # call id -> images it attached

    def cancel(self) -> None:
        if self._runner is not None:
            self._runner.cancel()

    async def run(self, calls: list[ToolCall], *, limit: int | None = None,
                  ) -> AsyncIterator[ToolStatus]:
        """Show, approve and run the calls; with `limit` (the last round) refuse them all."""
        if limit is not None:
            self.statuses = limit_statuses(calls, limit)
            for status in self.statuses:
                yield status
            return
        ctx = self._tools.context(self._conversation_id, store=self._store.handle,
                                  store_call=self._store.call)
        self._runner = ToolRunner(self._tools.registry, self._tools.policy, ctx, self._approve)
        try:
            async for status in self._runner.run(calls):
                if status.final:
                    self.statuses.append(status)
                    if status.figures:  # an MCP image result: attached before it shows
                        self._shown[status.call.id] = await self._images.attach_tool_images(
                            self._conversation_id, status.figures)
                yield status
        finally:
            self._runner = None

    async def save(self, assistant_id: str) -> str:
        """Store the results as one `tool` message under the assistant's; its id.
        Raises StoreError when the store cannot take it."""
        statuses = self.statuses
        return await self._store.call(
            self._store.handle.add_message, self._conversation_id, "tool",
            tool_results_text(statuses), parent_id=assistant_id,
            tool_results=[s.record() for s in statuses])

    async def follow_up(self, text: str, calls: list[ToolCall]) -> tuple[dict[str, Any], ...]:
        """The messages the next generation gets after this round: the assistant's calls,
        then each result."""
        results = [await self._tool_message(s, self._shown.get(s.call.id, []))
                   for s in self.statuses]
        return (assistant_message(text, calls), *results)

    async def _tool_message(self, status: ToolStatus,
                            images: list[AttachedImage]) -> dict[str, Any]:
        """A tool result for the follow-up generation; images it attached go in as they do
        for /attach: image parts for a model that sees, captions or a notice otherwise."""
        message = tool_message(status.call.id, status.call.name, status.result)
        if not images:
            return message
        block = await self._images.tool_images_text(images)
        if block is not None:
            return {**message, "content": f"{status.result}\n\n{block}"}
        parts: list[dict[str, Any]] = [{"type": "image", "path": a.image.path} for a in images]
        return {**message, "content": [*parts, {"type": "text", "text": status.result}]}
