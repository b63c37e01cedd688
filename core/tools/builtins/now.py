"""`now`: the current local date and time, which a model cannot know by itself."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.tools.registry import Tool, ToolContext, ToolResult


def current_time() -> datetime:
    """The aware local time; one seam, so a test can hold the clock still."""
    return datetime.now().astimezone()


async def _run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    stamp = current_time()
    text = f"{stamp.strftime('%A')} {stamp.isoformat(timespec='seconds')} ({stamp.tzname()})"
    return ToolResult(text, data={"iso": stamp.isoformat()})


TOOL = Tool(
    name="now",
    description="Get the current local date, time and time zone.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    run=_run,
    read_only=True,
)
