"""The branch tree: every message has a parent, a conversation remembers its active leaf
and shows the path from the root to it.

Edit and regenerate add a sibling (same parent) that becomes the active leaf; switching
branch only moves the leaf pointer. The walks are recursive SQL, one index lookup per
step, so paging, switching and deleting cost the same at any conversation size. Kept apart
from store.py because this is the one part of the store that reasons about the tree.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from .checks import message_gone
from .models import MESSAGE_COLUMNS, Message, message_from_row, new_id, storable

# Walk up from a message to the root, at most :limit steps; depth 0 is the start. The
# scalar subquery and CROSS JOIN pin the plan to one index lookup per step (a plain join
# lets the planner build a Bloom filter over the whole messages table on every call).
_BRANCH_UP = f"""
WITH RECURSIVE chain(id, depth) AS (
    SELECT :start, 0
    UNION ALL
    SELECT (SELECT m.parent_id FROM messages m WHERE m.id = chain.id), chain.depth + 1
    FROM chain WHERE chain.id IS NOT NULL AND chain.depth + 1 < :limit
)
SELECT {", ".join("m." + c.strip() for c in MESSAGE_COLUMNS.split(","))}
FROM chain CROSS JOIN messages m ON m.id = chain.id
ORDER BY chain.depth DESC
"""

# Steps any walk of the branch tree takes at most: the tree has no cycles unless another
# program edited the file, and then a walk must still end.
_MAX_DEPTH = 1_000_000

# Whether :target lies on the path from :leaf up to the root.
_ON_PATH = f"""
WITH RECURSIVE up(id, depth) AS (
    SELECT :leaf, 0
    UNION ALL
    SELECT (SELECT m.parent_id FROM messages m WHERE m.id = up.id), up.depth + 1 FROM up
    WHERE up.id IS NOT NULL AND up.id != :target AND up.depth < {_MAX_DEPTH}
)
SELECT 1 FROM up WHERE id = :target
"""

# The path from :target down to :leaf, oldest first (empty-ish when :target is off it).
_PATH_BELOW = f"""
WITH RECURSIVE up(id, depth) AS (
    SELECT :leaf, 0
    UNION ALL
    SELECT (SELECT m.parent_id FROM messages m WHERE m.id = up.id), up.depth + 1 FROM up
    WHERE up.id IS NOT NULL AND up.id != :target AND up.depth < {_MAX_DEPTH}
)
SELECT {", ".join("m." + c.strip() for c in MESSAGE_COLUMNS.split(","))}
FROM up CROSS JOIN messages m ON m.id = up.id
ORDER BY up.depth DESC
"""

# Walk down from a message along the newest child at each step; the deepest row is the leaf.
_NEWEST_LEAF = f"""
WITH RECURSIVE down(id, depth) AS (
    SELECT :start, 0
    UNION ALL
    SELECT (SELECT c.id FROM messages c WHERE c.parent_id = down.id ORDER BY c.seq DESC LIMIT 1),
           down.depth + 1
    FROM down WHERE down.id IS NOT NULL AND down.depth < {_MAX_DEPTH}
)
SELECT id FROM down WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1
"""


# A message and everything below it, parents before children (breadth by depth).
_SUBTREE = f"""
WITH RECURSIVE below(id, depth) AS (
    SELECT :start, 0
    UNION ALL
    SELECT m.id, below.depth + 1 FROM messages m JOIN below ON m.parent_id = below.id
    WHERE below.depth < {_MAX_DEPTH}
)
SELECT id FROM below ORDER BY depth
"""


class BranchTree:
    """Mixed into Store, whose connection, lock, transactions and add_message it uses."""

    conn: sqlite3.Connection
    _lock: threading.RLock

    def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...  # provided by Store

    def _read(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]: ...  # provided by Store

    def add_message(self, conversation_id: str, role: str, content: str,
                    **fields: Any) -> str: ...  # provided by Store

    def get_message(self, message_id: str) -> Message | None: ...  # provided by Store

    # -- the active branch ---------------------------------------------------------------

    def messages(
        self, conversation_id: str, limit: int = 50, before: str | None = None
    ) -> list[Message]:
        """The active branch, oldest first: its last `limit` messages, or the `limit` just
        before message `before` (for loading older pages)."""
        if limit <= 0:
            return []
        with self._lock:
            if before is None:
                start = self._active_leaf(conversation_id)
            else:
                row = self.conn.execute(
                    "SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?",
                    (before, conversation_id),
                ).fetchone()
                start = row[0] if row else None
            if start is None:
                return []
            rows = self._read(_BRANCH_UP, {"start": start, "limit": limit})
        return [message_from_row(row) for row in rows]

    def _active_leaf(self, conversation_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT active_leaf_id FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return None if row is None else leaf_or_latest(self.conn, conversation_id, row[0])

    def active_leaf(self, conversation_id: str) -> str | None:
        """Id of the last message on the active branch (None for an empty conversation)."""
        with self._lock:
            return self._active_leaf(conversation_id)

    # -- branches ------------------------------------------------------------------------

    def branches(self, message_id: str) -> list[Message]:
        """`message_id` and its siblings (same parent), oldest first: the alternatives the
        UI pages through with "< 2/3 >"."""
        rows = self._read(
            f"""SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id =
                    (SELECT conversation_id FROM messages WHERE id = :id)
                AND parent_id IS (SELECT parent_id FROM messages WHERE id = :id)
                ORDER BY seq""",
            {"id": message_id},
        )
        return [message_from_row(row) for row in rows]

    def switch_branch(self, message_id: str) -> str:
        """Make the branch through `message_id` active and return its leaf id. A message
        already on the active branch keeps it; otherwise the newest child is followed at
        each step below it. One pointer write: instant at any size."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise message_gone()
            leaf = self._active_leaf(row[0])
            if leaf is not None and conn.execute(
                _ON_PATH, {"leaf": leaf, "target": message_id}
            ).fetchone():
                return leaf
            leaf = conn.execute(_NEWEST_LEAF, {"start": message_id}).fetchone()[0]
            conn.execute(
                "UPDATE conversations SET active_leaf_id = ? WHERE id = ?", (leaf, row[0])
            )
        return leaf

    def messages_through(
        self, conversation_id: str, message_id: str, limit: int = 50
    ) -> list[Message]:
        """The page of the active branch that ends with `message_id` (inclusive), oldest
        first: where to open a conversation at a search hit. Call switch_branch first
        when the hit may sit on another branch."""
        if limit <= 0:
            return []
        with self._lock:
            known = self.conn.execute(
                "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                (message_id, conversation_id),
            ).fetchone()
            if known is None:
                return []
            rows = self._read(_BRANCH_UP, {"start": message_id, "limit": limit})
        return [message_from_row(row) for row in rows]

    def messages_after(self, conversation_id: str, after: str, limit: int = 50) -> list[Message]:
        """The `limit` messages that follow `after` on the active branch, oldest first
        (the newer pages once a conversation was opened at an older message)."""
        if limit <= 0:
            return []
        with self._lock:
            leaf = self._active_leaf(conversation_id)
            if leaf is None:
                return []
            rows = self._read(_PATH_BELOW, {"leaf": leaf, "target": after})
        below = [message_from_row(row) for row in rows]
        if not below or below[0].id != after:
            return []  # `after` is not on the active branch
        return below[1 : 1 + limit]

    def delete_message(self, message_id: str) -> int:
        """Delete a message and every reply below it (a reply without the message it answers
        would be a branch without a question); returns how many messages went, 0 when it
        was already gone. Each row is deleted by id so the FTS triggers keep search in step.
        When the active branch ran through it, the newest surviving sibling's branch becomes
        active, else its parent."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                return 0
            conversation_id, parent_id = row
            subtree = [r[0] for r in conn.execute(_SUBTREE, {"start": message_id})]
            leaf = self._active_leaf(conversation_id)
            # Deepest first, so no row's cascade reaches a child before the child's own
            # delete runs its FTS trigger.
            for mid in reversed(subtree):
                conn.execute("DELETE FROM messages WHERE id = ?", (mid,))
            if leaf is not None and leaf in subtree:
                sibling = conn.execute(
                    "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (conversation_id, parent_id),
                ).fetchone()
                new_leaf = (
                    conn.execute(_NEWEST_LEAF, {"start": sibling[0]}).fetchone()[0]
                    if sibling else parent_id
                )
                conn.execute(
                    "UPDATE conversations SET active_leaf_id = ? WHERE id = ?",
                    (new_leaf, conversation_id),
                )
        return len(subtree)

    def edit_message(self, message_id: str, content: str) -> str:
        """Add an edited copy of a message as its sibling (the original is kept as another
        branch) and make it active; returns the new id."""
        original = self.get_message(message_id)
        if original is None:
            raise message_gone()
        return self._add_sibling(original, storable(content))

    def _add_sibling(self, original: Message, content: str) -> str:
        if original.parent_id is not None:
            return self.add_message(
                original.conversation_id, original.role, content,
                parent_id=original.parent_id, model=original.model,
            )
        # A new root: add_message would otherwise hang it under the active leaf.
        message_id = new_id()
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, model, "
                "created_at) VALUES (?, ?, NULL, ?, ?, ?, ?)",
                (message_id, original.conversation_id, original.role, content, original.model, now),
            )
            conn.execute(
                "UPDATE conversations SET updated_at = ?, active_leaf_id = ? WHERE id = ?",
                (now, message_id, original.conversation_id),
            )
        return message_id


def leaf_or_latest(conn: sqlite3.Connection, conversation_id: str, leaf: str | None) -> str | None:
    """The stored active leaf when it is a message of this conversation; otherwise (None,
    or a pointer left dangling by another program's edit) the newest message, so the
    history still shows and the next message appends under it."""
    if leaf is not None and conn.execute(
            "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
            (leaf, conversation_id)).fetchone():
        return leaf
    return _latest_message(conn, conversation_id)


def _latest_message(conn: sqlite3.Connection, conversation_id: str) -> str | None:
    row = conn.execute(
        "SELECT id FROM messages WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
        (conversation_id,),
    ).fetchone()
    return row[0] if row else None
