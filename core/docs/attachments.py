"""Kept path: attachment aliases and `@doc(alias)` mentions now live in core.wire.docs
(the composer resolves mentions in the client); core.docs imports them from here."""

from core.wire.docs import (
    MENTION_OPEN,
    Attachment,
    AttachmentRegistry,
    Mention,
    MentionResolution,
    parse_mentions,
    resolve_mentions,
)

__all__ = ["MENTION_OPEN", "Attachment", "AttachmentRegistry", "Mention", "MentionResolution",
           "parse_mentions", "resolve_mentions"]
