"""The reply recorder: one assistant message saved as it streams, under ONE flush policy.

Text and reasoning reach the store (as a partial message) at most every FLUSH_S, queued on
the store thread without waiting, so a crash loses at most that much; `finish` writes the
rest and the final status (complete, cut, stopped, partial, error) and waits for it. A
reply that ended at its length limit is stored `cut`, so it never looks finished; a
continued one (`continues`) goes on in the same message, its token count added up. The
MessageStream under it writes whenever it is fed (interval 0): the policy lives here only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from core.events import Done, Error, Event, ReasoningDelta, TextDelta, ToolCall, Usage
from core.runtime.store_thread import StoreThread
from core.store import MessageStream, StoreError

FLUSH_S = 0.25


class ReplyRecorder:
    """Feed it a generation's events; `finish` once the generation ends (however it ends)."""

    def __init__(self, store: StoreThread, conversation_id: str, *, model: str,
                 parent_id: str, clock: Callable[[], float] = time.monotonic,
                 continues: Any = None) -> None:
        self._store = store
        self._clock = clock
        ids = None if continues is None else (continues.id, continues.content,
                                              continues.reasoning)
        self.stream = MessageStream(store.handle, conversation_id, model=model,
                                    parent_id=parent_id, interval=0.0, continues=ids)
        # the continued message's own tokens: its count covers the whole reply
        self._earlier_tokens = int(((continues.usage if continues else None) or {})
                                   .get("completion_tokens", 0))
        self._text: list[str] = []  # not yet sent to the store thread
        self._reasoning: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None
        self.error: Error | None = None
        self.finish_reason = "error"  # until a Done says otherwise
        # The loaded model's context (set once it is loaded): a reply that filled it is
        # stored saying so, since only a larger context lets it go on (context_used).
        self.context_size = 0
        self._last_flush = clock()
        self._recorded = 0

    def record(self, event: Event) -> None:
        """Take one event; queue a write when FLUSH_S has passed since the last one."""
        self._recorded += 1
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCall):
            self.tool_calls.append({"id": event.id, "name": event.name,
                                    "arguments": event.arguments, "error": event.error})
        elif isinstance(event, Usage):
            self.usage = {"prompt_tokens": event.prompt_tokens,
                          "cached_tokens": event.cached_tokens,
                          "completion_tokens": event.completion_tokens + self._earlier_tokens,
                          "ttft_ms": event.ttft_ms, "decode_tps": event.decode_tps,
                          "context_used": event.prompt_tokens + event.completion_tokens}
            if self.context_size:
                self.usage["context_size"] = self.context_size
        elif isinstance(event, Error):
            self.error = event
        elif isinstance(event, Done):
            self.finish_reason = event.finish_reason
        now = self._clock()
        if (self._text or self._reasoning) and now - self._last_flush >= FLUSH_S:
            self._last_flush = now
            t, r = self._take()
            self._store.call_nowait(self.stream.feed, t, r)

    def _take(self) -> tuple[str, str]:
        t, r = "".join(self._text), "".join(self._reasoning)
        self._text.clear()
        self._reasoning.clear()
        return t, r

    @property
    def empty(self) -> bool:
        """No event of this generation recorded yet."""
        return not self._recorded

    @property
    def message_id(self) -> str | None:
        return self.stream.message_id

    async def finish(self, *, cancelled: bool) -> Error | None:
        """Write what is left and the message's status; the Error to show when the store
        could not take it (None when saved). `cancelled`: the user stopped the turn."""
        t, r = self._take()
        error = self.error
        status = "error" if error is not None else "complete"
        # Esc is no failure; the pool ending a reply (its model unloaded) is, and says why,
        # unless the reply was being stopped anyway (Esc, or the Runtime closing).
        if error is not None and error.code == "CANCELLED" and (
                self.finish_reason != "error" or cancelled):
            error = None
        if error is not None and error.code == "WORKER_CRASHED":
            status = "partial"
        elif error is None and (cancelled or self.finish_reason == "cancelled"):
            status = "stopped"  # Esc: the text is all the user wanted, not a failure
        elif error is None and self.finish_reason == "length":
            status = "cut"  # at the length limit: shown as cut, and it can be continued
        stream, usage, calls = self.stream, self.usage, self.tool_calls

        def _finish() -> None:
            if t or r:
                stream.feed(t, r)
            stream.finish(status, usage=usage, tool_calls=calls or None,
                          error=error.message if error else None)

        try:
            await self._store.call(_finish)
        except StoreError as exc:  # disk full, file gone: the reply stays on screen
            return unsaved_reply(exc, stream)
        return None


def unsaved_reply(exc: StoreError, stream: MessageStream) -> Error:
    """What to tell the user when a streamed reply could not be saved: why, and how much
    of it is on disk (the app keeps running; the text stays on screen)."""
    kept = len(stream.flushed_text) if stream.message_id is not None else 0
    saved = (f"The first {kept:,} characters of this reply are saved" if kept
             else "This reply was not saved")
    return Error("STORE_FAILED", f"{exc.message} {saved}; the rest is only on screen.")
