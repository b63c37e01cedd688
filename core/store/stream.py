"""Writing a streaming assistant message without writing on every token.

The row appears (status partial) with the first non-empty piece, then is rewritten at most
once per `interval` seconds, and a last time at finish. A crash (even kill -9) therefore
loses at most the text since the last write, and what is on disk says `partial`.
Call it from the store's worker thread, like the Store itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import NOT_FOUND, StoreError

if TYPE_CHECKING:
    from .store import Store


class MessageStream:
    """Accumulates deltas of one assistant message and persists them on a schedule.

    If the conversation is deleted while streaming, the stream becomes `orphaned` and
    quietly stops writing: there is nothing left to save it into.
    """

    def __init__(
        self,
        store: Store,
        conversation_id: str,
        *,
        model: str | None = None,
        parent_id: str | None = None,
        interval: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        continues: tuple[str, str, str] | None = None,
    ) -> None:
        """`continues` (message id, its text, its reasoning): go on writing that stored
        message (a reply cut at its length limit, continued in place) instead of a new one."""
        self.store = store
        self.conversation_id = conversation_id
        self.model = model
        self.parent_id = parent_id
        self.interval = interval
        self._clock = clock
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._last_write = 0.0
        self._dirty = False
        self.message_id: str | None = None
        if continues is not None:
            self.message_id = continues[0]
            self._text = [continues[1]] if continues[1] else []
            self._reasoning = [continues[2]] if continues[2] else []
        self.writes = 0  # rows written (creation included), for tests and the bench
        self.flushed_text = ""  # content as of the last write
        self.finished = False
        self.orphaned = False

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def feed(self, text: str = "", reasoning: str = "") -> None:
        """Add a delta; writes only when the interval since the last write has passed."""
        if self.finished:
            raise RuntimeError("MessageStream.feed after finish")
        if not text and not reasoning:
            return
        if text:
            self._text.append(text)
        if reasoning:
            self._reasoning.append(reasoning)
        self._dirty = True
        if self.orphaned:
            return
        if self.message_id is None:
            self._create("partial")
        elif self._clock() - self._last_write >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Write the accumulated text now (if anything changed since the last write)."""
        if self.message_id is None or not self._dirty or self.orphaned:
            return
        content = self.text
        self._guard(lambda: self.store.update_message(
            self.message_id, content=content, reasoning=self.reasoning
        ))
        self._wrote(content)

    def finish(
        self,
        status: str = "complete",
        usage: dict[str, Any] | None = None,
        tool_calls: list[Any] | None = None,
        error: str | None = None,
    ) -> str | None:
        """Write the final text and status; returns the message id (None if orphaned)."""
        if self.finished:
            return self.message_id
        self.finished = True
        if self.orphaned:
            return None
        if self.message_id is None:
            self._create(status, usage=usage, tool_calls=tool_calls, error=error)
        else:
            content = self.text
            self._guard(lambda: self.store.update_message(
                self.message_id, content=content, reasoning=self.reasoning, status=status,
                usage=usage, tool_calls=tool_calls, error=error,
            ))
            self._wrote(content)
        return None if self.orphaned else self.message_id

    def _create(self, status: str, **extra: Any) -> None:
        content = self.text

        def create() -> None:
            self.message_id = self.store.add_message(
                self.conversation_id, "assistant", content, status=status,
                parent_id=self.parent_id, model=self.model, reasoning=self.reasoning, **extra,
            )

        self._guard(create)
        self._wrote(content)

    def _wrote(self, content: str) -> None:
        if self.orphaned:
            return
        self._last_write = self._clock()
        self._dirty = False
        self.writes += 1
        self.flushed_text = content

    def _guard(self, write: Callable[[], None]) -> None:
        try:
            write()
        except StoreError as exc:
            if exc.code != NOT_FOUND:
                raise
            self.orphaned = True
