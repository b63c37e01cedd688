"""The one error type the store raises for things a user can cause.

The UI shows `message` as is, so it is a sentence a person can act on; `code` lets the
runtime decide what to do (offer to move the file aside, retry, ...) without parsing text.
"""

from __future__ import annotations

# Codes, kept small and stable: the runtime and the UI switch on them.
SCHEMA_TOO_NEW = "SCHEMA_TOO_NEW"
NOT_A_DATABASE = "NOT_A_DATABASE"
CANNOT_OPEN = "CANNOT_OPEN"
MIGRATION_FAILED = "MIGRATION_FAILED"
LOCKED = "LOCKED"
DISK_FULL = "DISK_FULL"
NOT_FOUND = "NOT_FOUND"
BAD_IMPORT = "BAD_IMPORT"


class StoreError(Exception):
    """A store failure with a stable `code` and a user-facing `message`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"StoreError({self.code!r}, {self.message!r})"
