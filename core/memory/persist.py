"""Keep rollover markers in the conversation store, in the message stream itself.

The store has no table for markers, and a marker belongs at a point of the conversation,
so it is written as a `system` message at that point: its content is the summary (so it
shows in the chat view and full-text search finds it) and its `usage` column carries the
whole marker record under "rollover". This is a proposal the runtime can keep or replace;
the marker itself (`RolloverMarker.to_dict`) does not depend on it.
"""

from __future__ import annotations

from typing import Any

from core.memory.rollover import RolloverMarker

USAGE_KEY = "rollover"


def marker_text(marker: RolloverMarker) -> str:
    """What the chat view shows at the rollover point."""
    return (
        f"Memory rollover #{marker.seq}: the conversation was condensed to fit the context "
        f"({marker.tokens_before} -> {marker.tokens_after} of {marker.context_tokens} tokens).\n\n"
        f"{marker.summary}"
    )


def save_marker(store: Any, marker: RolloverMarker, parent_id: str | None = None) -> str:
    """Append the marker to its conversation's active branch; returns the message id."""
    return store.add_message(
        marker.conversation_id,
        "system",
        marker_text(marker),
        parent_id=parent_id,
        usage={USAGE_KEY: marker.to_dict()},
    )


def is_marker(message: Any) -> bool:
    return message.role == "system" and bool(message.usage) and USAGE_KEY in message.usage


def load_markers(store: Any, conversation_id: str, limit: int = 10_000) -> list[RolloverMarker]:
    """Every marker on the active branch, oldest first."""
    return [
        RolloverMarker.from_dict(m.usage[USAGE_KEY])
        for m in store.messages(conversation_id, limit=limit)
        if is_marker(m)
    ]
