"""Full-text search that never raises on what a person types, and stays fast on big
histories.

User text is never handed to FTS5 as is. `fts_query` rebuilds it from pieces FTS5 cannot
misread: every word or "quoted phrase" becomes a double-quoted string (so AND, NEAR, `:`,
`(`, `-`, `^` are just text), a trailing `*` keeps prefix search, and OR / NOT written in
capitals between two terms stay operators. Anything else — unbalanced quotes, a dangling
AND, a lone `*` — degrades to plain words.

Ranking is FTS5's bm25 over the newest CANDIDATES matching messages: exact for any query
that matches fewer messages than that, and for a query matching most of the history
("the") it favours recent conversations instead of scoring 200,000 rows for nothing.

Snippets are cut here rather than by FTS5's snippet(), which costs about half a
millisecond per row on a large index; they mark matches with « and » (HIGHLIGHT_START /
HIGHLIGHT_END), and `snippet_parts` splits one for rendering, so the UI never has to
parse markup out of user text.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from dataclasses import dataclass

from core.wire.store import HIGHLIGHT_END, HIGHLIGHT_START, snippet_parts  # noqa: F401

from .models import SearchHit, storable, text_column

ELLIPSIS = "…"
SNIPPET_TOKENS = 12
CANDIDATES = 1000

_PIECE = re.compile(r'"([^"]*)"(\*?)|(\S+)')
_WORDY = re.compile(r"[^\W_]", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)  # unicode61: letters and digits
_OPERATORS = {"OR", "NOT", "AND"}
# Longer queries are cut here: nobody types more into a search box, and FTS5's cost grows
# with every term (a pasted 1 MB "query" would hold the store thread for seconds).
MAX_QUERY_CHARS = 1000


def clean_query(user_text: str) -> str:
    """`user_text` as SQLite can take it: surrogate pairs joined into their character, lone
    surrogates (which UTF-8 cannot encode, so sqlite3 raised UnicodeEncodeError) and NULs
    replaced by U+FFFD, and at most MAX_QUERY_CHARS characters."""
    return storable(user_text[: MAX_QUERY_CHARS * 2]).replace("\x00", "\ufffd")[:MAX_QUERY_CHARS]


@dataclass(frozen=True, slots=True)
class _Term:
    text: str
    prefix: bool

    def fts(self) -> str:
        return '"' + self.text.replace('"', " ") + '"' + ("*" if self.prefix else "")


def _parse(user_text: str) -> list[_Term | str]:
    """Terms and the operators that sit between two terms (AND is implicit: dropped)."""
    items: list[_Term | str] = []
    for match in _PIECE.finditer(user_text):
        phrase, phrase_star, bare = match.groups()
        if bare is not None and bare in _OPERATORS:
            items.append(bare)
            continue
        if bare is None:
            text, prefix = phrase, bool(phrase_star)
        else:
            text, prefix = bare.rstrip("*").replace('"', " "), bare.endswith("*")
        if _WORDY.search(text):
            items.append(_Term(text, prefix))
    out: list[_Term | str] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            prev_is_term = bool(out) and isinstance(out[-1], _Term)
            next_is_term = index + 1 < len(items) and isinstance(items[index + 1], _Term)
            if item != "AND" and prev_is_term and next_is_term:
                out.append(item)
            continue
        out.append(item)
    return out


def fts_query(user_text: str) -> str | None:
    """The FTS5 expression for `user_text`, or None when it holds no searchable word."""
    items = _parse(clean_query(user_text))
    return " ".join(i.fts() if isinstance(i, _Term) else i for i in items) or None


def _fold(token: str) -> str:
    if token.isascii():
        return token.lower()
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


class _Matcher:
    """Which tokens of a text count as hits for highlighting (terms after NOT do not)."""

    def __init__(self, items: list[_Term | str]) -> None:
        self.exact: set[str] = set()
        self.prefixes: list[str] = []
        negated = False
        for item in items:
            if isinstance(item, str):
                negated = item == "NOT"
                continue
            if not negated:
                tokens = [_fold(t) for t in _TOKEN.findall(item.text)]
                if item.prefix and tokens:
                    self.prefixes.append(tokens.pop())
                self.exact.update(tokens)
            negated = False

        # One regex over the whole text finds the hits of an ASCII text (the common case)
        # without a Python call per token; other text goes token by token through _fold.
        alternatives = [re.escape(t) for t in sorted(self.exact)]
        alternatives += [re.escape(p) + r"[^\W_]*" for p in self.prefixes]
        self._ascii_hits = (
            re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", re.IGNORECASE)
            if alternatives
            else None
        )

    def hit(self, token: str) -> bool:
        folded = _fold(token)
        return folded in self.exact or any(folded.startswith(p) for p in self.prefixes)

    def hit_starts(self, text: str, spans: list[tuple[int, int]]) -> set[int]:
        """Start offsets of the tokens of `text` that are hits."""
        if text.isascii():
            if self._ascii_hits is None:
                return set()
            return {m.start() for m in self._ascii_hits.finditer(text)}
        return {start for start, end in spans if self.hit(text[start:end])}


def _mark(text: str) -> str:
    return f"{HIGHLIGHT_START}{text}{HIGHLIGHT_END}"


def make_snippet(text: str, matcher: _Matcher, window: int = SNIPPET_TOKENS) -> str:
    """The `window` tokens of `text` with the most hits, hits marked, on one line."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    if not spans:
        return " ".join(text.split())[:80]
    starts = matcher.hit_starts(text, spans)
    flags = [start in starts for start, _ in spans]
    best_start, best_hits, hits = 0, -1, 0
    for end, flag in enumerate(flags):
        hits += flag
        if end >= window:
            hits -= flags[end - window]
        if end >= min(window, len(spans)) - 1 and hits > best_hits:
            best_start, best_hits = max(0, end - window + 1), hits
    stop = min(best_start + window, len(spans))
    lo = spans[best_start][0] if best_start > 0 else 0
    hi = spans[stop - 1][1] if stop < len(spans) else len(text)
    pieces, cursor = [], lo
    for index in range(best_start, stop):
        if flags[index]:
            start, end = spans[index]
            pieces += [text[cursor:start], _mark(text[start:end])]
            cursor = end
    pieces.append(text[cursor:hi])
    body = " ".join("".join(pieces).split())
    return (ELLIPSIS if lo > 0 else "") + body + (ELLIPSIS if hi < len(text) else "")


def highlight(text: str, matcher: _Matcher) -> str:
    """All of `text` (a title) with hits marked."""
    return _TOKEN.sub(lambda m: _mark(m.group()) if matcher.hit(m.group()) else m.group(), text)




# Best-ranked message per conversation among the newest :cap matches. SQLite returns the
# bare columns of the row that holds min(rank), which is what we want here; CROSS JOIN
# keeps the planner from scanning messages to build a Bloom filter.
_MESSAGE_HITS = """
WITH hits AS (
    SELECT rowid AS seq, rank FROM messages_fts WHERE messages_fts MATCH :q
    ORDER BY rowid DESC LIMIT :cap
)
SELECT m.conversation_id, m.id, m.seq, min(hits.rank) AS best
FROM hits CROSS JOIN messages m ON m.seq = hits.seq
GROUP BY m.conversation_id
ORDER BY best
LIMIT :limit
"""

_TITLE_HITS = """
WITH hits AS (
    SELECT rowid AS seq, rank FROM titles_fts WHERE titles_fts MATCH :q
    ORDER BY rowid DESC LIMIT :cap
)
SELECT c.id, c.title, hits.rank FROM hits CROSS JOIN conversations c ON c.seq = hits.seq
ORDER BY hits.rank
LIMIT :limit
"""


def search(conn: sqlite3.Connection, user_text: str, limit: int) -> list[SearchHit]:
    """Conversations matching `user_text`, best first, one hit per conversation."""
    user_text = clean_query(user_text)
    items = _parse(user_text)
    if not items or limit <= 0:
        return []
    query = " ".join(i.fts() if isinstance(i, _Term) else i for i in items)
    try:
        return _search(conn, query, _Matcher(items), limit)
    except sqlite3.OperationalError:
        # _parse should make this unreachable; if FTS5 still objects, fall back to the
        # bare words rather than failing a keystroke in the search box.
        words = [_Term(w, False) for w in _TOKEN.findall(user_text)]
        plain = " ".join(w.fts() for w in words)
        if not plain or plain == query:
            return []
        try:
            return _search(conn, plain, _Matcher(list(words)), limit)
        except sqlite3.OperationalError:
            return []


def _search(conn: sqlite3.Connection, query: str, matcher: _Matcher, limit: int) -> list[SearchHit]:
    params = {"q": query, "limit": limit, "cap": CANDIDATES}
    # conversation id -> (rank, message id, message seq or None, title when it is the hit)
    best: dict[str, tuple[float, str | None, int | None, str]] = {}
    for conv_id, msg_id, seq, rank in conn.execute(_MESSAGE_HITS, params):
        best[conv_id] = (rank, msg_id, seq, "")
    titles: dict[str, str | None] = {}
    for conv_id, title, rank in conn.execute(_TITLE_HITS, params):
        titles[conv_id] = title
        if conv_id not in best or rank < best[conv_id][0]:
            best[conv_id] = (rank, None, None, title or "")
    ranked = sorted(best.items(), key=lambda item: item[1][0])[:limit]
    if not ranked:
        return []
    # Only the rows we return are read in full.
    seqs = [seq for _, (_, _, seq, _) in ranked if seq is not None]
    contents: dict[int, str] = {}
    if seqs:
        marks = ",".join("?" * len(seqs))
        contents = dict(conn.execute(f"SELECT seq, content FROM messages WHERE seq IN ({marks})", seqs))
    missing = [conv for conv, _ in ranked if conv not in titles]
    if missing:
        marks = ",".join("?" * len(missing))
        titles.update(conn.execute(f"SELECT id, title FROM conversations WHERE id IN ({marks})", missing))
    hits = []
    for conv_id, (rank, msg_id, seq, title) in ranked:
        if seq is not None:
            snippet = make_snippet(text_column(contents.get(seq, "")), matcher)
        else:
            snippet = highlight(text_column(title), matcher)
        shown = titles.get(conv_id)
        hits.append(SearchHit(conv_id, None if shown is None else text_column(shown), msg_id,
                              snippet, rank))
    return hits
