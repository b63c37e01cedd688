"""Errors a user can cause when attaching a file (a document or an image), as values.

Attaching a file is a user action: a missing path, an encrypted PDF or a picture too big
to open is not a bug, so the readers return an `AttachError` (code + a sentence a person
can act on) instead of raising. Documents (core.docs) and images (core.vision) both
refuse files this way and the chat treats their refusals alike, so the type lives below
both rooms. The composer shows `message`; `to_event` maps it onto the stream vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.events import Error

AttachErrorCode = Literal[
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

# Which events.Error code each attach error travels as when it has to be streamed.
_EVENT_CODE: dict[str, str] = {
    "UNSUPPORTED_TYPE": "UNSUPPORTED",
    "ENCRYPTED": "UNSUPPORTED",
    "TIMEOUT": "TIMEOUT",
}


@dataclass(frozen=True, slots=True)
class AttachError:
    """Why a file could not be attached; `message` is shown to the user as is."""

    code: AttachErrorCode
    message: str
    path: str = ""

    def to_event(self) -> Error:
        return Error(_EVENT_CODE.get(self.code, "BAD_REQUEST"), self.message)
