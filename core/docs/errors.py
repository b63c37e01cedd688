"""Errors a user can cause when attaching a document, as values.

Attaching a file is a user action: a missing path or an encrypted PDF is not a bug, so
extraction returns a `DocError` (code + a sentence a person can act on) instead of
raising. The composer shows `message`; `to_event` maps it onto the stream vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.events import Error

DocErrorCode = Literal[
    "NOT_FOUND",
    "IS_DIRECTORY",
    "TOO_LARGE",
    "BINARY",
    "UNSUPPORTED_TYPE",
    "ENCRYPTED",
    "CORRUPT",
    "EMPTY",
    "UNREADABLE",
    "UNSAFE",  # built to attack a reader: a DTD with entities, parts that lie about sizes
    "TIMEOUT",  # reading took longer than a document may take
]

# Which events.Error code each document error travels as when it has to be streamed.
_EVENT_CODE: dict[str, str] = {
    "UNSUPPORTED_TYPE": "UNSUPPORTED",
    "ENCRYPTED": "UNSUPPORTED",
    "TIMEOUT": "TIMEOUT",
}


@dataclass(frozen=True, slots=True)
class DocError:
    """Why a document could not be attached; `message` is shown to the user as is."""

    code: DocErrorCode
    message: str
    path: str = ""

    def to_event(self) -> Error:
        return Error(_EVENT_CODE.get(self.code, "BAD_REQUEST"), self.message)


class DocRefused(Exception):
    """Raised by a check deep inside extraction; `extract` returns its `error`."""

    def __init__(self, error: DocError) -> None:
        super().__init__(error.message)
        self.error = error


def refused(code: DocErrorCode, message: str, path: object) -> DocRefused:
    """The exception for a refusal of the file at `path` (shown as given)."""
    return DocRefused(DocError(code, message, str(path)))


def mb(size: float) -> str:
    """Sizes in refusal sentences: '190 MB', '0.5 MB' (MiB, written as people say it)."""
    value = size / (1024 * 1024)
    return f"{value:.0f} MB" if value >= 1 or value == 0 else f"{value:.1g} MB"
