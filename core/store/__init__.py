"""Conversation history in SQLite: conversations, branching messages, FTS5 search,
streaming writes that survive crashes, export/import, attachments and chunks.

Call everything from one dedicated thread (the runtime's store worker), never the UI loop.

    store = Store.open(path)                      # creates/migrates; StoreError on trouble
    store = check_store(open_store(path))         # the app's way: a garbage or damaged
                                                  # file is moved aside (store.recovery)
    cid = store.create_conversation(model=label)
    store.add_message(cid, "user", text)          # titles an untitled conversation
    stream = MessageStream(store, cid, model=label, parent_id=user_id)
    stream.feed(text, reasoning); stream.finish("complete", usage=..., tool_calls=...)
    store.messages(cid)                           # active branch, last 50, oldest first
    store.messages(cid, before=page[0].id)        # older page
    store.search("query")                         # SearchHit per conversation, «» marks
    store.edit_message(mid, text) / store.branches(mid) / store.switch_branch(mid)
    store.export_json(cid) / store.import_json(text, path or file: streamed, bounded)
    / store.export_markdown(cid)

Every StoreError has a stable `code` (errors.py) and a `message` to show as is.
"""

from typing import TYPE_CHECKING, Any

from .errors import StoreError
from .models import Attachment, Chunk, Conversation, Message, SearchHit

if TYPE_CHECKING:
    from .recovery import Recovery, check_store, open_store
    from .schema import SCHEMA_VERSION
    from .search import HIGHLIGHT_END, HIGHLIGHT_START, fts_query, snippet_parts
    from .store import Store
    from .stream import MessageStream
    from .titles import auto_title

# The rest loads on first use: the engine service's client reads only the plain records
# above before its first frame, and SQLite's side (store, recovery, search, export) was
# a tenth of its start-up imports (issue 48).
_FROM = {"Recovery": "recovery", "check_store": "recovery", "open_store": "recovery",
         "SCHEMA_VERSION": "schema", "HIGHLIGHT_END": "search", "HIGHLIGHT_START": "search",
         "fts_query": "search", "snippet_parts": "search", "Store": "store",
         "MessageStream": "stream", "auto_title": "titles"}

__all__ = [
    "HIGHLIGHT_END",
    "HIGHLIGHT_START",
    "SCHEMA_VERSION",
    "Attachment",
    "Chunk",
    "Conversation",
    "Message",
    "MessageStream",
    "Recovery",
    "SearchHit",
    "Store",
    "StoreError",
    "auto_title",
    "check_store",
    "fts_query",
    "open_store",
    "snippet_parts",
]


def __getattr__(name: str) -> Any:
    if name in _FROM:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
