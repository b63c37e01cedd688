"""The documents' plain data as the UI shows it: an attached file under its alias, the
`@doc(...)` mentions of a message and which of them matched, and the refusal of an
attachment (DocError: core.attach_errors.AttachError, shared with images).

The reading, chunking and retrieval stay in core.docs, which re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.attach_errors import AttachError

DocError = AttachError


@dataclass(frozen=True, slots=True)
class Attachment:
    """One file attached to a conversation under a unique alias."""

    alias: str
    path: str
    name: str


@dataclass(frozen=True, slots=True)
class Mention:
    """An `@doc(...)` in a message: the alias text and where it sits (for highlighting)."""

    alias: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class MentionResolution:
    """Which mentions matched an attachment, and which did not (to warn about)."""

    resolved: tuple[Attachment, ...]
    unresolved: tuple[Mention, ...]
    mentions: tuple[Mention, ...]

    @property
    def ok(self) -> bool:
        return not self.unresolved
