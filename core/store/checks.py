"""Argument checks and the "no longer exists" errors shared by the store's methods.

A wrong role, status or parent is a caller's bug (ValueError); a conversation or message
deleted in another window is the user's doing (StoreError NOT_FOUND, a sentence to show).
One place for them keeps those sentences the same wherever a method meets them.
"""

from __future__ import annotations

import sqlite3

from .errors import NOT_FOUND, StoreError
from .models import ROLES, STATUSES


def check_parent(conn: sqlite3.Connection, conversation_id: str, parent_id: str) -> None:
    """`parent_id` exists and belongs to `conversation_id`."""
    row = conn.execute(
        "SELECT conversation_id FROM messages WHERE id = ?", (parent_id,)
    ).fetchone()
    if row is None:
        raise StoreError(
            NOT_FOUND, "The message to reply to no longer exists; reload the conversation."
        )
    if row[0] != conversation_id:
        raise ValueError(f"parent {parent_id} belongs to another conversation")


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")


def check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")


def message_gone() -> StoreError:
    return StoreError(
        NOT_FOUND, "This message no longer exists; its conversation may have been deleted."
    )


def conversation_gone(conversation_id: str) -> StoreError:
    return StoreError(
        NOT_FOUND, "This conversation no longer exists; it may have been deleted in another window."
    )
