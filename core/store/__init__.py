"""Conversation history in SQLite: conversations, branching messages, FTS5 search,
streaming writes that survive crashes, export/import, attachments and chunks."""

from .errors import StoreError
from .models import Attachment, Chunk, Conversation, Message, SearchHit
from .schema import SCHEMA_VERSION
from .search import HIGHLIGHT_END, HIGHLIGHT_START, fts_query, snippet_parts
from .store import Store
from .stream import MessageStream
from .titles import auto_title

__all__ = [
    "HIGHLIGHT_END",
    "HIGHLIGHT_START",
    "SCHEMA_VERSION",
    "Attachment",
    "Chunk",
    "Conversation",
    "Message",
    "MessageStream",
    "SearchHit",
    "Store",
    "StoreError",
    "auto_title",
    "fts_query",
    "snippet_parts",
]
