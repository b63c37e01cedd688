"""The documents' plain data as the UI shows it: an attached file under its alias, the
`@doc(...)` mentions of a message and which of them matched (the composer checks them as
the person types), and the refusal of an attachment (DocError:
core.attach_errors.AttachError, shared with images).

A person refers to an attached file by a short alias (its file name); attaching a second
file of the same name gives `report.pdf #2`, so every alias names exactly one file.
A message selects which documents feed that turn with `@doc(alias)`; mentions that match
nothing are returned separately so the composer can flag them before sending.

The reading, chunking and retrieval stay in core.docs, which re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.attach_errors import AttachError

DocError = AttachError
MENTION_OPEN = "@doc("


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


class AttachmentRegistry:
    """The attachments of one conversation, addressable by alias."""

    def __init__(self, attachments: list[Attachment] | None = None) -> None:
        self._by_alias: dict[str, Attachment] = {}
        for attachment in attachments or []:
            self._by_alias[attachment.alias] = attachment

    def add(self, path: str | Path, alias: str | None = None) -> Attachment:
        """Attach `path`; a name already in use gets the next free `name #N`.

        `alias` restores a known alias (a conversation reloaded from the store); it
        replaces whatever held that alias.
        """
        name = Path(path).name
        if alias is None:
            alias = name
            n = 2
            while alias in self._by_alias:
                alias = f"{name} #{n}"
                n += 1
        attachment = Attachment(alias, str(path), name)
        self._by_alias[alias] = attachment
        return attachment

    def remove(self, alias: str) -> Attachment | None:
        return self._by_alias.pop(alias, None)

    def get(self, alias: str) -> Attachment | None:
        """Exact alias first; else a case-insensitive match when only one file fits."""
        alias = alias.strip()
        if alias in self._by_alias:
            return self._by_alias[alias]
        folded = [a for key, a in self._by_alias.items() if key.casefold() == alias.casefold()]
        return folded[0] if len(folded) == 1 else None

    def all(self) -> list[Attachment]:
        return list(self._by_alias.values())

    def __len__(self) -> int:
        return len(self._by_alias)

    def resolve(self, text: str) -> MentionResolution:
        return resolve_mentions(text, self)


def parse_mentions(text: str) -> list[Mention]:
    """Find every `@doc(alias)`; parentheses inside the alias must balance.

    Downloaded files are often named `report (1).pdf`, so the alias ends at the `)` that
    closes the `@doc(`, not at the first one. An unclosed mention runs to the end of the
    line and is still reported (so the composer can flag it).
    """
    mentions: list[Mention] = []
    i = 0
    lowered = text.lower()
    while True:
        start = lowered.find(MENTION_OPEN, i)
        if start < 0:
            return mentions
        j = start + len(MENTION_OPEN)
        depth = 1
        while j < len(text) and text[j] != "\n":
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        closed = j < len(text) and text[j] == ")"
        alias = text[start + len(MENTION_OPEN) : j].strip()
        end = j + 1 if closed else j
        mentions.append(Mention(alias, start, end))
        i = end if end > start else start + 1


def resolve_mentions(text: str, registry: AttachmentRegistry) -> MentionResolution:
    """Split the mentions of `text` into attachments found and aliases unknown."""
    mentions = parse_mentions(text)
    resolved: list[Attachment] = []
    unresolved: list[Mention] = []
    for mention in mentions:
        attachment = registry.get(mention.alias) if mention.alias else None
        if attachment is None:
            unresolved.append(mention)
        elif attachment not in resolved:
            resolved.append(attachment)
    return MentionResolution(tuple(resolved), tuple(unresolved), tuple(mentions))
