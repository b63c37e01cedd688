"""The one error type the store raises for things a user can cause.

The UI shows `message` as is, so it is a sentence a person can act on; `code` lets the
runtime decide what to do (offer to move the file aside, retry, ...) without parsing text.
It lives in core.wire.store (it crosses the socket to the UI); this module keeps its path.
"""

from core.wire.store import (  # noqa: F401
    BAD_IMPORT,
    CANNOT_OPEN,
    DISK_FULL,
    LOCKED,
    MIGRATION_FAILED,
    NOT_A_DATABASE,
    NOT_FOUND,
    SCHEMA_TOO_NEW,
    StoreError,
)
