"""Long-conversation memory: the context wind monitor and summarise-and-rehydrate."""

from core.memory.persist import (
    is_marker,
    load_markers,
    marker_headline,
    marker_of,
    resume_from_messages,
    save_marker,
)
from core.memory.rollover import ConversationMemory, RolloverMarker, TurnPlan
from core.memory.window import DEFAULT_THRESHOLD, ContextMonitor, messages_tokens

__all__ = [
    "DEFAULT_THRESHOLD",
    "ContextMonitor",
    "ConversationMemory",
    "RolloverMarker",
    "TurnPlan",
    "is_marker",
    "load_markers",
    "marker_headline",
    "marker_of",
    "resume_from_messages",
    "save_marker",
    "messages_tokens",
]
