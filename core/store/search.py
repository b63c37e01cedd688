"""Full-text search that never raises on what a person types.

User text is never handed to FTS5 as is. `fts_query` rebuilds it from pieces FTS5 cannot
misread: every word or "quoted phrase" becomes a double-quoted string (so AND, NEAR, `:`,
`(`, `-`, `^` are just text), a trailing `*` keeps prefix search, and OR / NOT written in
capitals between two terms stay operators. Anything else — unbalanced quotes, a dangling
AND, a lone `*` — degrades to plain words.

Snippets mark matches with « and » (HIGHLIGHT_START / HIGHLIGHT_END); `snippet_parts`
splits a snippet for rendering, so the UI never has to parse markup out of user text.
"""

from __future__ import annotations

import re
import sqlite3

from .models import SearchHit

HIGHLIGHT_START = "«"
HIGHLIGHT_END = "»"
ELLIPSIS = "…"
SNIPPET_TOKENS = 12

_PIECE = re.compile(r'"([^"]*)"(\*?)|(\S+)')
_WORDY = re.compile(r"\w", re.UNICODE)
_OPERATORS = {"OR", "NOT", "AND"}


def _quoted(text: str, prefix: bool) -> str | None:
    if not _WORDY.search(text):
        return None
    return '"' + text.replace('"', " ") + '"' + ("*" if prefix else "")


def fts_query(user_text: str) -> str | None:
    """The FTS5 expression for `user_text`, or None when it holds no searchable word."""
    items: list[str] = []  # terms and operators, in order
    for match in _PIECE.finditer(user_text):
        phrase, phrase_star, bare = match.groups()
        if bare is None:
            term = _quoted(phrase, bool(phrase_star))
        elif bare in _OPERATORS:
            items.append(bare)
            continue
        else:
            prefix = bare.endswith("*")
            term = _quoted(bare.rstrip("*").replace('"', " "), prefix)
        if term is not None:
            items.append(term)
    # Operators only survive between two terms; AND is implicit, so it is dropped.
    out: list[str] = []
    for index, item in enumerate(items):
        if item in _OPERATORS:
            prev_is_term = bool(out) and out[-1] not in _OPERATORS
            next_is_term = index + 1 < len(items) and items[index + 1] not in _OPERATORS
            if item != "AND" and prev_is_term and next_is_term:
                out.append(item)
            continue
        out.append(item)
    return " ".join(out) or None


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """Split a snippet into (text, highlighted) runs."""
    parts: list[tuple[str, bool]] = []
    for piece in re.split(f"({HIGHLIGHT_START}[^{HIGHLIGHT_END}]*{HIGHLIGHT_END})", snippet):
        if not piece:
            continue
        if piece.startswith(HIGHLIGHT_START) and piece.endswith(HIGHLIGHT_END):
            parts.append((piece[1:-1], True))
        else:
            parts.append((piece, False))
    return parts


# Best-ranked message per conversation. SQLite returns the bare columns of the row that
# holds min(rank), which is what we want here.
_MESSAGE_HITS = """
WITH hits AS (
    SELECT rowid AS seq, rank FROM messages_fts WHERE messages_fts MATCH :q
)
SELECT m.conversation_id, m.seq, m.id, min(hits.rank) AS best
FROM hits JOIN messages m ON m.seq = hits.seq
GROUP BY m.conversation_id
ORDER BY best
LIMIT :limit
"""

_TITLE_HITS = """
SELECT c.id, highlight(titles_fts, 0, :hs, :he), titles_fts.rank
FROM titles_fts JOIN conversations c ON c.seq = titles_fts.rowid
WHERE titles_fts MATCH :q
ORDER BY titles_fts.rank
LIMIT :limit
"""


def search(conn: sqlite3.Connection, user_text: str, limit: int) -> list[SearchHit]:
    """Conversations matching `user_text`, best first, one hit per conversation."""
    query = fts_query(user_text)
    if query is None or limit <= 0:
        return []
    try:
        return _search(conn, query, limit)
    except sqlite3.OperationalError:
        # fts_query should make this unreachable; if FTS5 still objects, fall back to
        # the bare words rather than failing a keystroke in the search box.
        words = " ".join(f'"{w}"' for w in re.findall(r"\w+", user_text))
        if not words or words == query:
            return []
        try:
            return _search(conn, words, limit)
        except sqlite3.OperationalError:
            return []


def _search(conn: sqlite3.Connection, query: str, limit: int) -> list[SearchHit]:
    params = {"q": query, "limit": limit, "hs": HIGHLIGHT_START, "he": HIGHLIGHT_END}
    # conversation id -> (rank, message id, message seq, highlighted title)
    best: dict[str, tuple[float, str | None, int | None, str | None]] = {}
    for conv_id, seq, msg_id, rank in conn.execute(_MESSAGE_HITS, params):
        best[conv_id] = (rank, msg_id, seq, None)
    for conv_id, title_snip, rank in conn.execute(_TITLE_HITS, params):
        if conv_id not in best or rank < best[conv_id][0]:
            best[conv_id] = (rank, None, None, title_snip)
    ranked = sorted(best.items(), key=lambda item: item[1][0])[:limit]
    if not ranked:
        return []
    # Snippets only for the rows we return: snippet() is the costly part of a search.
    wanted = [seq for _, (_, _, seq, _) in ranked if seq is not None]
    snippets: dict[int, str] = {}
    if wanted:
        marks = ",".join("?" * len(wanted))
        rows = conn.execute(
            f"SELECT rowid, snippet(messages_fts, 0, ?, ?, ?, ?) FROM messages_fts "
            f"WHERE messages_fts MATCH ? AND rowid IN ({marks})",
            [HIGHLIGHT_START, HIGHLIGHT_END, ELLIPSIS, SNIPPET_TOKENS, query, *wanted],
        )
        snippets = dict(rows)
    ids = [conv for conv, _ in ranked]
    marks = ",".join("?" * len(ids))
    titles = dict(conn.execute(f"SELECT id, title FROM conversations WHERE id IN ({marks})", ids))
    hits = []
    for conv_id, (rank, msg_id, seq, title_snip) in ranked:
        snippet = snippets.get(seq, "") if seq is not None else (title_snip or "")
        hits.append(SearchHit(conv_id, titles.get(conv_id), msg_id, snippet, rank))
    return hits
