"""A whole reply gathered from a request's event batches, for the routes that answer in
one JSON body (chat and legacy completions with stream off)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from core.events import Done, Error, Event, Logprobs, ReasoningDelta, TextDelta, ToolCall, Usage


@dataclass
class Collected:
    """What one generation said; `error` is set when it ended in one (the route maps it
    to its own API error), and then the rest is what came before it."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage | None = None
    finish: str = "stop"
    stop_sequence: str | None = None  # the stop string that ended it (Done.stop_sequence)
    error: Error | None = None


async def collect(first: list[Event], batches: AsyncIterator[list[Event]]) -> Collected:
    """Read batches (starting with `first`, already taken) until Done, an Error or the end."""
    got = Collected()
    batch: list[Event] | None = first
    while batch is not None:
        for event in batch:
            if isinstance(event, TextDelta):
                got.text.append(event.text)
            elif isinstance(event, Logprobs):
                got.logprobs.extend(event.content)
            elif isinstance(event, ReasoningDelta):
                got.reasoning.append(event.text)
            elif isinstance(event, ToolCall):
                got.calls.append(event)
            elif isinstance(event, Usage):
                got.usage = event
            elif isinstance(event, Error):
                got.error = event
                return got
            elif isinstance(event, Done):
                got.finish = event.finish_reason
                got.stop_sequence = event.stop_sequence
        if isinstance(batch[-1], Done):
            break
        batch = await anext(batches, None)
    return got
