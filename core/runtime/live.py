"""Live turns: a reply that runs as the Runtime's own task, watched by any number of views.

A reply used to run only while the UI iterated it: when the view went away (its terminal
closed, its client disconnected) the reply stopped half-way. Now each started turn runs in
a task the Runtime owns, to its end, whoever watches.

Its events go into a TurnFeed: an append-only log where consecutive deltas of one kind
merge into one entry (the reply so far is a few entries, not one per token). A watcher is
only a cursor into that log, so
- a late watcher first gets the past, compacted (the text so far as one TextDelta, the
  reasoning as one ReasoningDelta, tool calls and statuses in order), then live events;
- a slow watcher never blocks the turn and costs no memory of its own: when it comes back
  it gets everything it missed, consecutive deltas merged;
- a watcher that leaves (stops iterating) changes nothing for the turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from core.events import ReasoningDelta, TextDelta, ToolCallDelta


@dataclass(frozen=True, slots=True)
class LiveTurnInfo:
    """A turn running now (what `llmdeck` lists and a view opens)."""

    turn_id: str
    conversation_id: str
    started: float  # time.time() when it started
    model: str  # the model's label


class _Entry:
    """One log entry: a single event, or a run of merged deltas of one kind (its pieces
    kept as a list so appending is cheap and a cursor can point inside it)."""

    __slots__ = ("event", "kind", "key", "name", "pieces")

    def __init__(self, event: Any) -> None:
        self.event = event
        self.kind: type | None = type(event) if _mergeable(event) else None
        self.key = event.id if isinstance(event, ToolCallDelta) else None
        self.name = event.name if isinstance(event, ToolCallDelta) else None
        self.pieces: list[str] = [_piece(event)] if self.kind is not None else []

    def takes(self, event: Any) -> bool:
        if self.kind is None or type(event) is not self.kind:
            return False
        return not isinstance(event, ToolCallDelta) or event.id == self.key

    def add(self, event: Any) -> None:
        self.pieces.append(_piece(event))
        if self.name is None and isinstance(event, ToolCallDelta):
            self.name = event.name

    def since(self, start: int) -> Any:
        """The entry from piece `start` on, as one event."""
        if self.kind is None:
            return self.event
        text = "".join(self.pieces[start:])
        if self.kind is ToolCallDelta:
            return ToolCallDelta(self.key, self.name if start == 0 else None, text)
        return self.kind(text)


def _mergeable(event: Any) -> bool:
    return isinstance(event, TextDelta | ReasoningDelta | ToolCallDelta)


def _piece(event: Any) -> str:
    return event.arguments if isinstance(event, ToolCallDelta) else event.text


class TurnFeed:
    """The events of one turn so far, and the signal that more arrived."""

    def __init__(self) -> None:
        self._log: list[_Entry] = []
        self._changed = asyncio.Event()
        self.ended = False
        self.failure: BaseException | None = None  # raised to every watcher at the end

    def publish(self, event: Any) -> None:
        if self._log and self._log[-1].takes(event):
            self._log[-1].add(event)
        else:
            self._log.append(_Entry(event))
        self._wake()

    def end(self, failure: BaseException | None = None) -> None:
        self.ended = True
        self.failure = failure
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def past(self) -> list[Any]:
        """The events so far, compacted (what a watcher starting now gets first)."""
        return [entry.since(0) for entry in self._log]

    def watch(self, cancel: Callable[[], None]) -> TurnWatch:
        return TurnWatch(self, cancel)

    async def _next(self, cursor: list[int]) -> Any:
        """The next event for a cursor [entry, piece]; StopAsyncIteration at the end."""
        while True:
            entry_no, piece_no = cursor
            if entry_no < len(self._log):
                entry = self._log[entry_no]
                if piece_no < max(1, len(entry.pieces)):
                    event = entry.since(piece_no)
                    cursor[1] = max(1, len(entry.pieces))
                    return event
                if entry_no + 1 < len(self._log):
                    cursor[0], cursor[1] = entry_no + 1, 0
                    continue
            if self.ended:
                if self.failure is not None:
                    raise self.failure
                raise StopAsyncIteration
            await self._changed.wait()


class TurnWatch:
    """One view of a live turn: an async iterator of its events (the past compacted, then
    live). Leaving it (no more iteration) never stops the turn; `cancel` does (Esc)."""

    def __init__(self, feed: TurnFeed, cancel: Callable[[], None]) -> None:
        self._feed = feed
        self._cancel = cancel
        self._cursor = [0, 0]

    def __aiter__(self) -> TurnWatch:
        return self

    async def __anext__(self) -> Any:
        return await self._feed._next(self._cursor)

    def cancel(self) -> None:
        """Stop the turn for everyone: it ends as cancelled, its text kept."""
        self._cancel()


class RunnableTurn(Protocol):
    """What the registry needs of a turn (core.runtime.turns.Turn)."""

    conversation_id: str
    feed: TurnFeed

    def cancel(self) -> None: ...

    def run(self) -> Awaitable[None]: ...


@dataclass
class _Running:
    info: LiveTurnInfo
    turn: RunnableTurn
    task: asyncio.Task[None]


class LiveTurns:
    """The turns running now, each in its own task; the Runtime holds one."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def start(self, turn: RunnableTurn, turn_id: str, model: str) -> None:
        """Run `turn` to its end in a task of its own."""
        info = LiveTurnInfo(turn_id, turn.conversation_id, time.time(), model)
        task = asyncio.ensure_future(self._run(turn_id, turn))
        self._running[turn_id] = _Running(info, turn, task)

    async def _run(self, turn_id: str, turn: RunnableTurn) -> None:
        try:
            await turn.run()
        finally:
            self._running.pop(turn_id, None)

    def infos(self) -> list[LiveTurnInfo]:
        """The running turns, oldest first."""
        return sorted((r.info for r in self._running.values()), key=lambda i: i.started)

    def _newest(self, conversation_id: str) -> _Running | None:
        found = [r for r in self._running.values() if r.info.conversation_id == conversation_id]
        return max(found, key=lambda r: r.info.started) if found else None

    def watch(self, conversation_id: str) -> TurnWatch | None:
        """A new view of the turn running in that conversation; None when none runs."""
        running = self._newest(conversation_id)
        if running is None:
            return None
        return running.turn.feed.watch(running.turn.cancel)

    def cancel(self, conversation_id: str) -> bool:
        """Stop the turn running in that conversation (stored as stopped); False if none."""
        running = self._newest(conversation_id)
        if running is None:
            return False
        running.turn.cancel()
        return True

    def cancel_all(self) -> None:
        """Stop every running turn (the Runtime is closing): each ends as cancelled."""
        for r in list(self._running.values()):
            r.turn.cancel()

    async def settle(self, within_s: float, *, force: bool = False) -> None:
        """Wait up to `within_s` for the running turns to end; with `force`, then cancel
        the task of each that has not (its reply is still stored with what it has)."""
        tasks = [r.task for r in self._running.values() if not r.task.done()]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=within_s)
        if force and late:
            for task in late:
                task.cancel()
            await asyncio.wait(late, timeout=within_s)
