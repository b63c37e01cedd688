"""The conversation store as `llmdeck mcp` reads it while a service runs: searches and
pages come from the service (the store's one writer, so what an agent reads is what the
app shows, a streaming reply included); document text, which no service call offers,
is still read from the database with writes refused by SQLite (query_only)."""

from __future__ import annotations

from typing import Any

from core.service.blocking_client import BlockingClient
from core.service.client import ServiceUnavailable


class ServiceStore:
    """The slice of core.store.Store that core.tools.mcp.share.ReadOnlyHistory uses."""

    def __init__(self, client: BlockingClient) -> None:
        self._client = client
        self._conn: Any = None

    def search(self, query: str, limit: int) -> Any:
        return self._client.call("search", query=query, limit=limit)

    def get_conversation(self, conversation_id: str) -> Any:
        return self._client.call("conversation", conversation_id=conversation_id)

    def messages(self, conversation_id: str, limit: int = 50) -> Any:
        return self._client.call("messages", conversation_id=conversation_id, limit=limit)

    @property
    def conn(self) -> Any:
        if self._conn is None:
            from core import paths
            from core.store import Store

            path = paths.db_path()
            if not path.is_file():
                raise LookupError("No conversations are stored yet.")
            self._conn = Store.open(path).conn
            self._conn.execute("PRAGMA query_only = ON")
        return self._conn


def service_history_store() -> ServiceStore | None:
    """A ServiceStore when this home's service runs, else None (read the file directly)."""
    from core.service.socket_path import socket_path

    path = socket_path()
    if not path.exists():
        return None
    try:
        return ServiceStore(BlockingClient(str(path), timeout=30, client="mcp"))
    except ServiceUnavailable:
        return None
