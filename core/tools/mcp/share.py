"""`llmdeck mcp`: an MCP server (stdio) that lets another agent search a person's own
llmdeck history, read-only, and only what the person turned on in settings.

    [config.toml]  mcp_share_conversations = true   # search_conversations, read_conversation
                   mcp_share_documents = true       # search_documents

The database is opened with SQLite's query_only switch on, so nothing the server is asked
can change it; a missing database is never created. The command itself is the engine
service's client (core.service.mcp_face), which hands this server its history view.
"""

from __future__ import annotations

import threading
from typing import Any

from core import paths
from core.config import Settings

MAX_HITS = 20
EXCERPT_CHARS = 400
MAX_MESSAGES = 100


class ReadOnlyHistory:
    """The store, opened on first use with writes refused by SQLite itself."""

    def __init__(self, store: Any = None) -> None:
        self._store: Any = store  # the engine service's view when it runs (core.service)
        self._lock = threading.Lock()

    def store(self) -> Any:
        from core.store import Store

        with self._lock:
            if self._store is None:
                path = paths.db_path()
                if not path.is_file():
                    raise LookupError("No conversations are stored yet (llmdeck has not been used here).")
                self._store = Store.open(path)
                self._store.conn.execute("PRAGMA query_only = ON")
            return self._store

    def search_conversations(self, query: str, limit: int) -> str:
        from core.store import HIGHLIGHT_END, HIGHLIGHT_START

        query = query.strip()
        if not query:
            return "Give some words to search for."
        hits = self.store().search(query, max(1, min(limit, MAX_HITS)))
        if not hits:
            return f"No stored conversation matches {query!r}."
        lines = [f"{len(hits)} conversation(s) match {query!r}:"]
        for h in hits:
            snippet = h.snippet.replace(HIGHLIGHT_START, "**").replace(HIGHLIGHT_END, "**")
            lines.append(f"- [{h.conversation_id}] {h.title or 'Untitled'}: {snippet}")
        return "\n".join(lines)

    def read_conversation(self, conversation_id: str, limit: int) -> str:
        store = self.store()
        conv = store.get_conversation(conversation_id)
        if conv is None:
            return f"No conversation has the id {conversation_id!r}; search_conversations lists ids."
        messages = store.messages(conversation_id, max(1, min(limit, MAX_MESSAGES)))
        lines = [f"# {conv.title or 'Untitled'}"]
        lines += [f"\n{m.role}: {m.content}" for m in messages if m.role in ("user", "assistant") and m.content]
        return "\n".join(lines)

    def search_documents(self, query: str, limit: int) -> str:
        words = [w for w in query.lower().split() if w]
        if not words:
            return "Give some words to search for."
        store = self.store()
        rows = store.conn.execute(
            "SELECT a.alias, a.text, c.title FROM attachments a JOIN conversations c "
            "ON c.id = a.conversation_id WHERE " + " AND ".join(["lower(a.text) LIKE ?"] * len(words))
            + " ORDER BY a.created_at DESC LIMIT ?",
            [*(f"%{w}%" for w in words), max(1, min(limit, MAX_HITS))]).fetchall()
        if not rows:
            return f"No stored document contains {query!r}."
        lines = [f"{len(rows)} document(s) contain {query!r}:"]
        for alias, text, title in rows:
            at = text.lower().find(words[0])
            start = max(0, at - EXCERPT_CHARS // 2)
            excerpt = " ".join(text[start:start + EXCERPT_CHARS].split())
            lines.append(f"- {alias} (in “{title or 'Untitled'}”): …{excerpt}…")
        return "\n".join(lines)


def build_server(settings: Settings, history: ReadOnlyHistory | None = None) -> Any:
    """The MCP server with the tools the settings allow (possibly none)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    history = history or ReadOnlyHistory()
    server = MCPServer("llmdeck", instructions="Read-only search over the person's llmdeck "
                       "conversations and attached documents.")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    def answer(fn: Any, *args: Any) -> str:
        try:
            return fn(*args)
        except LookupError as exc:
            return str(exc)

    if settings.mcp_share_conversations:
        @server.tool(description="Search the person's saved llmdeck conversations by keywords; "
                     "returns ids, titles and matching snippets.", annotations=read_only)
        def search_conversations(query: str, limit: int = 5) -> str:
            return answer(history.search_conversations, query, limit)

        @server.tool(description="Read the messages of one saved conversation (by the id "
                     "search_conversations gave).", annotations=read_only)
        def read_conversation(conversation_id: str, limit: int = 40) -> str:
            return answer(history.read_conversation, conversation_id, limit)

    if settings.mcp_share_documents:
        @server.tool(description="Search the text of documents the person attached to "
                     "conversations; returns names and excerpts.", annotations=read_only)
        def search_documents(query: str, limit: int = 5) -> str:
            return answer(history.search_documents, query, limit)

    return server


NOTHING_SHARED = (
    "llmdeck mcp offers nothing yet: turn on what other agents may search in llmdeck's "
    "settings (F3, 'Share with other agents'), or set mcp_share_conversations = true and/or "
    "mcp_share_documents = true in {path}.")
