"""Summaries written ahead: the one that will make room, started before it is needed.

From PREPARE_AT full the runtime starts the summary of a session in the background and
keeps it here under the session's id; the turn that reaches the threshold takes it when
it is done (`ready`) and never waits for one that is not: the session then goes on whole
a little longer. One summary per session; a session that rolled over is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from core.memory.rollover import PreparedSummary


class SummariesAhead:
    """The background summaries of one runtime, by session id."""

    def __init__(self) -> None:
        # session id -> (session messages the summary covers, the task writing it)
        self._tasks: dict[str, tuple[int, asyncio.Future[str]]] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._tasks

    def start(self, session_id: str, covered: int, write: Awaitable[str]) -> None:
        """Write the summary of the session's first `covered` messages (once per session)."""
        if session_id in self._tasks:
            write.close() if asyncio.iscoroutine(write) else None
            return
        self._tasks[session_id] = (covered, asyncio.ensure_future(write))

    def ready(self, session_id: str) -> PreparedSummary | None:
        """The session's summary once written; None while it is being written, or when
        writing it failed (it is then started again from the next turn)."""
        entry = self._tasks.get(session_id)
        if entry is None or not entry[1].done():
            return None
        covered, task = entry
        if task.cancelled() or task.exception() is not None or not task.result().strip():
            self._tasks.pop(session_id, None)
            return None
        return PreparedSummary(session_id, covered, task.result())

    def pending(self) -> list[asyncio.Future[str]]:
        """The summaries still being written (a bench or a test may wait for them)."""
        return [task for _, task in self._tasks.values() if not task.done()]

    def yield_to_turn(self, session_id: str) -> None:
        """A turn of the session starts on an engine that runs one request at a time: a
        summary still being written would hold the turn up, so it stops, and is started
        again after the turn (what the person reads meanwhile is its time)."""
        entry = self._tasks.get(session_id)
        if entry is not None and not entry[1].done():
            self.drop(session_id)

    def drop(self, session_id: str) -> None:
        """The session rolled over: its summary is no longer needed."""
        entry = self._tasks.pop(session_id, None)
        if entry is not None:
            entry[1].cancel()

    def close(self) -> None:
        for _, task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
