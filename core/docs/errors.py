"""Errors a user can cause when attaching a document, as values.

The value is core.attach_errors.AttachError, shared with images (core.vision) from below
both rooms; `DocError` is the documents' name for it, the same class, so a refusal from
either reader is one type to the chat. Here live the documents' own helpers: the
exception a check deep inside extraction raises, and the size wording of refusals.
"""

from __future__ import annotations

from core.attach_errors import AttachError, AttachErrorCode

DocError = AttachError


class DocRefused(Exception):
    """Raised by a check deep inside extraction; `extract` returns its `error`."""

    def __init__(self, error: AttachError) -> None:
        super().__init__(error.message)
        self.error = error


def refused(code: AttachErrorCode, message: str, path: object) -> DocRefused:
    """The exception for a refusal of the file at `path` (shown as given)."""
    return DocRefused(AttachError(code, message, str(path)))


def mb(size: float) -> str:
    """Sizes in refusal sentences: '190 MB', '0.5 MB' (MiB, written as people say it)."""
    value = size / (1024 * 1024)
    return f"{value:.0f} MB" if value >= 1 or value == 0 else f"{value:.1g} MB"
