"""At most one tool call per reply, for requests that turn parallel calls off.

OpenAI's `parallel_tool_calls: false` (chat, Responses) and Anthropic's
`tool_choice.disable_parallel_tool_use` promise the client one call at most: loops built
on that answer one call and send one result, and a second call left unanswered breaks
the next turn's history. A model may still write two, so the reply's first call is kept
and any later one (its deltas and its whole form) is dropped here, in
core.server.dialects.generation, before any dialect shapes the events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from core.events import Event, ToolCall, ToolCallDelta


class FirstCallOnly:
    """Filters one reply's batches: the first tool call's events pass, later calls' do not."""

    def __init__(self) -> None:
        self.first: str | None = None  # the kept call's id

    def __call__(self, batch: list[Event]) -> list[Event]:
        out = []
        for event in batch:
            if isinstance(event, ToolCall | ToolCallDelta):
                if self.first is None:
                    self.first = event.id
                elif event.id != self.first:
                    continue
            out.append(event)
        return out


class OneCallBatches:
    """The rest of a reply's batches through a FirstCallOnly; a batch left empty is
    skipped (routes read each batch's last event)."""

    def __init__(self, batches: AsyncIterator[list[Event]], keep: FirstCallOnly) -> None:
        self.batches = batches
        self.keep = keep

    def __aiter__(self) -> OneCallBatches:
        return self

    async def __anext__(self) -> list[Event]:
        while True:
            batch = self.keep(await anext(self.batches))
            if batch:
                return batch
