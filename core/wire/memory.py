"""Memory's plain data as the chat shows it: the rollover marker (where a conversation
was condensed into a fresh session) and the helpers that read one from a stored message.

The summarising and the context window stay in core.memory, which re-exports these.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RolloverMarker:
    """Where a conversation rolled over into a fresh session, and what it carried."""

    conversation_id: str
    seq: int  # 1 for the first rollover of the conversation, 2 for the second...
    at_message: int  # messages of the full history before this point
    old_session_id: str
    new_session_id: str
    summary: str
    facts: tuple[str, ...]
    kept_messages: int  # last messages carried over verbatim
    seed: tuple[Message, ...]  # the fresh session as the model will see it
    tokens_before: int  # projected prompt tokens that crossed the threshold
    tokens_after: int  # projected prompt tokens of the fresh session
    context_tokens: int
    created_at: float = field(default_factory=time.time)

    @property
    def kind(self) -> str:
        return "rollover"

    def to_dict(self) -> dict[str, Any]:
        """A plain record for the store (JSON-serialisable)."""
        record = asdict(self)
        record["seed"] = [dict(m) for m in self.seed]
        record["facts"] = list(self.facts)
        record["kind"] = self.kind
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> RolloverMarker:
        """Rebuild a marker kept by the store (inverse of `to_dict`)."""
        fields = {k: v for k, v in record.items() if k != "kind"}
        fields["facts"] = tuple(fields.get("facts", ()))
        fields["seed"] = tuple(dict(m) for m in fields.get("seed", ()))
        return cls(**fields)


USAGE_KEY = "rollover"


def marker_percent(marker: RolloverMarker) -> int:
    """How full the context was projected to be when the conversation rolled over."""
    return round(100 * marker.tokens_before / max(1, marker.context_tokens))


def marker_headline(marker: RolloverMarker) -> str:
    """The one line the chat view shows at the rollover point."""
    return (
        f"Memory: conversation summarised at {marker_percent(marker)}% of context — "
        "earlier messages remain searchable"
    )


def is_marker(message: Any) -> bool:
    return (message.role == "system" and bool(message.usage)
            and isinstance(message.usage.get(USAGE_KEY), dict))


def marker_of(message: Any) -> RolloverMarker | None:
    """The rollover marker a stored message carries (None for ordinary messages, and for
    a marker garbled on disk: the conversation then reads as if it had not rolled over)."""
    if not is_marker(message):
        return None
    try:
        return RolloverMarker.from_dict(message.usage[USAGE_KEY])
    except (TypeError, ValueError):
        return None
