"""Keep rollover markers in the conversation store, in the message stream itself.

The store has no table for markers, and a marker belongs at a point of the conversation,
so it is written as a `system` message at that point: its content is the summary (so it
shows in the chat view and full-text search finds it) and its `usage` column carries the
whole marker record under "rollover". This is a proposal the runtime can keep or replace;
the marker itself (`RolloverMarker.to_dict`) does not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.memory.rollover import ConversationMemory, RolloverMarker, Summarise
from core.memory.window import ContextMonitor
from core.wire.memory import USAGE_KEY, is_marker, marker_headline, marker_of, marker_percent  # noqa: F401


def marker_text(marker: RolloverMarker) -> str:
    """The stored message: headline, then the summary (so full-text search finds it)."""
    return (
        f"{marker_headline(marker)}\n\n"
        f"Rollover #{marker.seq}: the conversation was condensed to fit the context "
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


def load_markers(store: Any, conversation_id: str, limit: int = 10_000) -> list[RolloverMarker]:
    """Every marker on the active branch, oldest first."""
    found = (marker_of(m) for m in store.messages(conversation_id, limit=limit))
    return [m for m in found if m is not None]


def plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Stored user/assistant messages as chat messages (the default `convert`)."""
    return [
        {"role": m.role, "content": m.content}
        for m in messages
        if m.role in ("user", "assistant") and (m.content or m.role == "user")
    ]


def resume_from_messages(
    conversation_id: str,
    monitor: ContextMonitor,
    summarise: Summarise,
    messages: Sequence[Any],
    convert: Callable[[list[Any]], list[dict[str, Any]]] = plain_messages,
    **options: Any,
) -> ConversationMemory:
    """Rebuild the model-facing session from stored messages of the active branch.

    `messages` are store messages, markers included, oldest first; they may be only the
    newest page of a long branch: the session is the last marker's seed plus what was
    said after that marker, found by position in the page (not by the marker's absolute
    `at_message`), so a truncated page still rebuilds correctly. `convert` turns stored
    messages into chat messages (the runtime's keeps tool calls and results). Without a
    marker the session id is the conversation id, so a conversation keeps its worker (and
    its KV cache) from turn to turn.
    """
    memory = ConversationMemory(conversation_id, monitor, summarise, **options)
    markers: list[RolloverMarker] = []
    spoken: list[Any] = []
    after: list[Any] = []
    for m in messages:
        if is_marker(m):
            if (marker := marker_of(m)) is not None:
                markers.append(marker)
                after = []
        else:
            spoken.append(m)
            after.append(m)
    memory.history = convert(spoken)
    memory.markers = markers
    if markers:
        memory.session = [dict(m) for m in markers[-1].seed] + convert(after)
        memory.session_id = markers[-1].new_session_id
    else:
        memory.session = memory._system() + convert(spoken)
        memory.session_id = conversation_id
    return memory
