"""Opening the conversation database whatever state the file is in.

A file that is not a database (garbage, a truncated copy) or one that SQLite's quick_check
finds damaged is never used as is and never deleted: it is moved aside next to where it
was (`llmdeck.db.damaged-<time>`, with its -wal/-shm), a fresh database is opened in its
place, and every row that can still be read is copied into it (damaged pages are skipped).
The user is told where the old file went and how much came back (Recovery.message).

quick_check (not integrity_check) because start-up pays for it: on a warm cache it takes
22 ms on 20,000 messages (18 MB) and 195 ms on 200,000 (178 MB), where integrity_check,
which also cross-checks every index, takes 35 and 840 ms. It runs on the store thread after
the sidebar's first page is read, so the first frame never waits on it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import CANNOT_OPEN, NOT_A_DATABASE, StoreError
from .models import Recovery
from .schema import FTS_TABLES, rebuild_fts
from .store import Store

SQLITE_HEADER = b"SQLite format 3\x00"
# Tables copied out of a damaged file, parents first; columns are those both files have.
SALVAGE_TABLES = ("conversations", "messages", "attachments", "chunks")
_MAX_ROWID = 2**62
SALVAGE_BATCH = 1000


def open_store(path: Path | None = None) -> Store:
    """Store.open, except that a file which is not a database is moved aside and a fresh
    one opened (the Store's `recovery` says so). Other StoreErrors (a newer schema, a
    read-only folder, a full disk) are raised as they are."""
    if path is None:
        from core import paths

        path = paths.db_path()
    try:
        return Store.open(path)
    except StoreError as exc:
        if exc.code != NOT_A_DATABASE or not path.is_file():
            raise
        return recover(path, "it is not an SQLite database, or its first page is damaged")


def check_store(store: Store, on_damage: Callable[[], None] | None = None) -> Store:
    """`store` when quick_check passes; otherwise a fresh store with whatever rows could be
    read from the damaged one (which is closed and moved aside). `on_damage` is called
    (on this thread) before the recovery starts: a long history takes seconds to copy."""
    problems = store.quick_check()
    if not problems:
        return store
    if on_damage is not None:
        on_damage()
    path = store.path
    store.close()
    return recover(path, _reason(problems))


def _reason(problems: list[str]) -> str:
    """quick_check's report as one clause: its first finding (it stops after a few)."""
    lines = [line.strip() for text in problems for line in text.splitlines()
             if line.strip() and not line.startswith("***")]
    first = lines[0] if lines else "unknown damage"
    more = ", among other problems" if len(lines) > 1 else ""
    return f"SQLite's check found damage: {first}{more}"


def recover(path: Path, reason: str) -> Store:
    """Move the file at `path` aside, open a fresh database there, copy what can be read."""
    moved = _move_aside(path)
    store = Store.open(path)
    conversations = messages = 0
    if _is_sqlite(moved):
        try:
            conversations, messages = salvage(moved, store)
        except (sqlite3.Error, OSError):
            conversations = messages = 0  # nothing readable: the fresh file stays empty
    if conversations or messages:
        outcome = (f"{conversations:,} conversations and {messages:,} messages were recovered "
                   "from it; anything on its damaged pages is only in the moved file.")
    else:
        outcome = "nothing could be read back from it, so the new database is empty."
    store.recovery = Recovery(
        moved, reason, conversations, messages,
        f"The conversation database {path} was damaged ({reason}). It was moved to {moved} "
        f"and a new one was started; {outcome}",
    )
    return store


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while moved.exists():
        n += 1
        moved = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    try:
        for suffix in ("", "-wal", "-shm"):  # the WAL holds committed rows: keep it with it
            src = path.with_name(path.name + suffix)
            if src.exists():
                os.replace(src, moved.with_name(moved.name + suffix))
    except OSError as exc:
        raise StoreError(
            CANNOT_OPEN,
            f"The conversation database {path} is damaged and could not be moved aside "
            f"({exc}); move it away yourself and start llmdeck again.",
        ) from exc
    return moved


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def salvage(source: Path, store: Store) -> tuple[int, int]:
    """Copy every readable row of `source` into `store` (rows on damaged pages are skipped;
    links to rows that did not survive are cut); returns (conversations, messages) copied.
    Rows go across in batches, so a large history never sits in memory at once."""
    src = sqlite3.connect(str(source), isolation_level=None)
    conn = store.conn
    try:
        with store._lock:
            conn.execute("PRAGMA foreign_keys = OFF")  # parents may be among the lost rows
            try:
                conn.execute("BEGIN IMMEDIATE")
                # The search index is built once at the end (3x faster than a trigger per
                # row: 9 s instead of 28 s for 200,000 messages); the triggers come back.
                triggers = conn.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
                for name, _ in triggers:
                    conn.execute(f"DROP TRIGGER {name}")
                for table in SALVAGE_TABLES:
                    names = sorted(_columns(src, table) & _columns(conn, table))
                    if not names:
                        continue
                    insert = (f"INSERT OR IGNORE INTO {table} ({', '.join(names)}) "
                              f"VALUES ({', '.join('?' * len(names))})")
                    batch: list[tuple[object, ...]] = []
                    for row in _readable(src, table, names):
                        batch.append(row)
                        if len(batch) >= SALVAGE_BATCH:
                            conn.executemany(insert, batch)
                            batch.clear()
                    conn.executemany(insert, batch)
                _repair_links(conn)
                for table in FTS_TABLES:
                    rebuild_fts(conn, table)
                for _, sql in triggers:
                    conn.execute(sql)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                conn.execute("PRAGMA foreign_keys = ON")
            counted = [conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                       for t in ("conversations", "messages")]
    finally:
        src.close()
    return counted[0], counted[1]


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    try:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    except sqlite3.DatabaseError:
        return set()


def _readable(conn: sqlite3.Connection, table: str,
              names: list[str]) -> Iterator[tuple[object, ...]]:
    """The rows of `table` that can be read, in rowid order. A read that hits a damaged
    page restarts past it: the next readable rowid is found by probing ever larger gaps."""
    select = f"SELECT rowid, {', '.join(names)} FROM {table} WHERE rowid > ? ORDER BY rowid"
    probe = f"SELECT rowid FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1"
    last = 0
    while True:
        try:
            for row in conn.execute(select, (last,)):
                last = row[0]
                yield tuple(row[1:])
            return
        except sqlite3.DatabaseError:
            step = 1
            while True:
                if last + step > _MAX_ROWID:
                    return
                try:
                    found = conn.execute(probe, (last + step,)).fetchone()
                except sqlite3.DatabaseError:
                    step *= 2
                    continue
                if found is None:
                    return
                last = found[0] - 1
                break


def _repair_links(conn: sqlite3.Connection) -> None:
    """After a partial copy: messages whose conversation was lost get one of their own,
    replies whose parent was lost become roots, active leaves that were lost are forgotten
    (the newest message is shown), and attachments or chunks without an owner go."""
    now = time.time()
    conn.execute(
        "INSERT INTO conversations (id, title, title_source, created_at, updated_at) "
        "SELECT conversation_id, 'Recovered conversation', 'user', min(created_at), ? "
        "FROM messages WHERE conversation_id NOT IN (SELECT id FROM conversations) "
        "GROUP BY conversation_id", (now,))
    conn.execute("UPDATE messages SET parent_id = NULL WHERE parent_id IS NOT NULL "
                 "AND parent_id NOT IN (SELECT id FROM messages)")
    conn.execute("UPDATE conversations SET active_leaf_id = NULL WHERE active_leaf_id IS NOT "
                 "NULL AND active_leaf_id NOT IN (SELECT id FROM messages)")
    conn.execute("DELETE FROM attachments WHERE conversation_id NOT IN "
                 "(SELECT id FROM conversations)")
    conn.execute("DELETE FROM chunks WHERE attachment_id NOT IN (SELECT id FROM attachments)")
