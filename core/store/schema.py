"""Versioned schema. PRAGMA user_version holds the version; each migration runs in one
transaction with the version bump, so a crash or a failure mid-upgrade leaves the file
exactly as it was. Never edit a shipped migration: append a new one.

Messages and conversations carry an INTEGER PRIMARY KEY `seq` beside their uuid `id`
because FTS5 external-content tables key on rowid, and only an INTEGER PRIMARY KEY rowid
survives VACUUM unchanged.
"""

from __future__ import annotations

import sqlite3

from .errors import MIGRATION_FAILED, SCHEMA_TOO_NEW, StoreError

# Migration N (1-based) brings a database from version N-1 to N.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: conversations and the message tree.
    (
        """CREATE TABLE conversations (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            title TEXT,
            model TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            active_leaf_id TEXT
        )""",
        "CREATE INDEX conversations_activity ON conversations(updated_at, seq)",
        """CREATE TABLE messages (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            parent_id TEXT REFERENCES messages(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            content TEXT NOT NULL DEFAULT '',
            reasoning TEXT NOT NULL DEFAULT '',
            tool_calls TEXT,
            tool_results TEXT,
            usage TEXT,
            model TEXT,
            status TEXT NOT NULL DEFAULT 'complete',
            error TEXT,
            created_at REAL NOT NULL
        )""",
        "CREATE INDEX messages_conversation ON messages(conversation_id, seq)",
        "CREATE INDEX messages_parent ON messages(parent_id)",
    ),
    # 2: full-text search over message content and titles, kept in sync by triggers;
    # 'rebuild' indexes whatever rows an older database already holds. Prefix indexes
    # for 2- and 3-character prefixes keep `qu*`-style queries from merging thousands
    # of term lists (50 ms -> 8 ms at 200,000 messages).
    (
        """CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, content='messages', content_rowid='seq',
            tokenize='unicode61 remove_diacritics 2', prefix='2 3')""",
        """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.seq, new.content);
        END""",
        """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
                VALUES ('delete', old.seq, old.content);
        END""",
        """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
                VALUES ('delete', old.seq, old.content);
            INSERT INTO messages_fts(rowid, content) VALUES (new.seq, new.content);
        END""",
        "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
        """CREATE VIRTUAL TABLE titles_fts USING fts5(
            title, content='conversations', content_rowid='seq',
            tokenize='unicode61 remove_diacritics 2', prefix='2 3')""",
        """CREATE TRIGGER titles_fts_insert AFTER INSERT ON conversations BEGIN
            INSERT INTO titles_fts(rowid, title) VALUES (new.seq, new.title);
        END""",
        """CREATE TRIGGER titles_fts_delete AFTER DELETE ON conversations BEGIN
            INSERT INTO titles_fts(titles_fts, rowid, title) VALUES ('delete', old.seq, old.title);
        END""",
        """CREATE TRIGGER titles_fts_update AFTER UPDATE OF title ON conversations BEGIN
            INSERT INTO titles_fts(titles_fts, rowid, title) VALUES ('delete', old.seq, old.title);
            INSERT INTO titles_fts(rowid, title) VALUES (new.seq, new.title);
        END""",
        "INSERT INTO titles_fts(titles_fts) VALUES ('rebuild')",
    ),
    # 3: attachments and their chunks (with embeddings) for the documents feature.
    (
        """CREATE TABLE attachments (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            alias TEXT NOT NULL,
            path TEXT NOT NULL,
            mime TEXT,
            size INTEGER,
            text TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL
        )""",
        "CREATE INDEX attachments_conversation ON attachments(conversation_id, created_at)",
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            attachment_id TEXT NOT NULL REFERENCES attachments(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            source TEXT,
            embedding BLOB,
            UNIQUE (attachment_id, ordinal)
        )""",
    ),
    # 4: who wrote the title (auto | model | user), so a model-written title replaces the
    # truncated first line but never a title the user typed. Titles of older databases
    # are of unknown origin and are kept as if the user had typed them.
    (
        "ALTER TABLE conversations ADD COLUMN title_source TEXT",
        "UPDATE conversations SET title_source = 'user' WHERE title IS NOT NULL",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version it had before.

    The connection must be in autocommit mode (isolation_level=None) so the explicit
    BEGIN/COMMIT here are the only transaction boundaries.
    """
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise StoreError(
            SCHEMA_TOO_NEW,
            f"This database was written by a newer llmdeck (schema {found}); "
            "upgrade llmdeck to open it.",
        )
    for version in range(found + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-check under the write lock: another process may have migrated meanwhile.
            if schema_version(conn) >= version:
                conn.execute("COMMIT")
                continue
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(
                MIGRATION_FAILED,
                f"Could not upgrade the conversation database to schema {version} "
                f"({exc}); it is unchanged. Free disk space or move the file aside and retry.",
            ) from exc
    return found


FTS_TABLES = ("messages_fts", "titles_fts")


def rebuild_fts(conn: sqlite3.Connection, table: str) -> None:
    """Rebuild a full-text index from the rows it indexes, inside the caller's transaction.

    FTS5's own 'rebuild' needs the table's structure record to be readable; when that
    record is what got damaged, the index's shadow tables are first put back to the state
    of a new, empty index (the records an in-memory copy of the same table starts with).
    A damaged count in that record can make FTS5 ask for an impossible allocation, which
    sqlite3 raises as MemoryError (SQLITE_NOMEM): damage all the same.
    """
    try:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        return
    except (sqlite3.DatabaseError, MemoryError):  # a damaged size can ask for 2^31 of a thing
        pass
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    scratch = sqlite3.connect(":memory:")
    try:
        # Its external content table need not exist here: FTS5 reads it only on queries.
        scratch.execute(sql.replace(f"TABLE {table} USING", "TABLE fresh USING", 1))
        empty = scratch.execute("SELECT id, block FROM fresh_data").fetchall()
    finally:
        scratch.close()
    conn.execute(f"DELETE FROM {table}_data")
    conn.execute(f"DELETE FROM {table}_idx")
    conn.executemany(f"INSERT INTO {table}_data(id, block) VALUES (?, ?)", empty)
    conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")

