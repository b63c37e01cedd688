"""Which sqlite3 errors a user caused, and the sentence each becomes.

A locked file, a full disk or a damaged file is the user's to fix, so it becomes a
StoreError with a stable code and a message to show as is; a bug (bad SQL, a broken
constraint) stays the exception it is, for the log. Kept apart from errors.py so that
StoreError stays a plain type with no sqlite in it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .errors import CANNOT_OPEN, DISK_FULL, LOCKED, NOT_A_DATABASE, StoreError


def user_facing(exc: BaseException) -> bool:
    """Locks, full disks and damaged files reach the user; bugs (bad SQL, constraint
    violations) stay exceptions for the log."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError
    )


def corrupt(exc: BaseException) -> bool:
    """Whether SQLite says the file (or an index in it) is damaged."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)


def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """The StoreError a user sees for `exc` on the database at `path`."""
    text = str(exc).lower()
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL"):
        text = "full"
    elif corrupt(exc):
        text = "malformed"
    if "locked" in text or "busy" in text:
        return StoreError(
            LOCKED,
            f"The conversation database {path} is busy (another llmdeck is writing to it); "
            "close the other instance or try again.",
        )
    if "full" in text:
        return StoreError(
            DISK_FULL,
            f"The disk holding {path} is full; free some space so conversations can be saved.",
        )
    if "not a database" in text or "malformed" in text:
        return StoreError(
            NOT_A_DATABASE,
            f"{path} is not an llmdeck database or is damaged; move it aside and llmdeck "
            "will start a new one.",
        )
    return StoreError(CANNOT_OPEN, f"Could not use the conversation database {path}: {exc}.")
