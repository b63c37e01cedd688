"""Turns that live in the service: streamed to every client watching, whoever started them.

An adapter over the Runtime's own live turns (core.runtime.live): a turn runs in the
Runtime's task to its end, whoever watches, and its events are kept once, in the turn's
feed. Each client watching gets its own cursor into that feed (the past compacted, then
live) and a small task sending it over the socket, so a client that comes back or
attaches late (`watch_turn`) gets the reply from its first word, and a slow one gets the
text merged. What the hub adds: turn ids for the wire, a finished turn kept RETAIN_S for
a client that comes back to it, and tool approvals asked of the watching clients (the
first answer counts; nobody answering within APPROVAL_WAIT_S denies the call, so nothing
runs unseen).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.service import codec

APPROVAL_WAIT_S = 600.0
RETAIN_S = 120.0


class Subscriber(Protocol):
    def send(self, message: dict[str, Any]) -> None: ...


@dataclass
class LiveTurn:
    turn_id: str
    turn: Any  # core.runtime.Turn: its feed holds the events
    conversation_id: str
    started_at: float = field(default_factory=time.time)
    # Each watching client and the task sending it the turn from its own cursor.
    pumps: dict[Subscriber, asyncio.Task[None]] = field(default_factory=dict)  # type: ignore[assignment]
    asks: dict[str, tuple[asyncio.Future[str], dict[str, Any]]] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    task: asyncio.Task[None] | None = None  # the hub's own follower (the end, the asks)
    ended_at: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"turn": self.turn_id, "conversation_id": self.conversation_id,
                "user_message_id": self.turn.user_message_id,
                "assistant_message_id": self.turn.assistant_message_id,
                "started_at": self.started_at, "done": self.end is not None}


class TurnHub:
    def __init__(self, warning: Callable[[str], str | None] | None = None,
                 can_always: Callable[[str], bool] | None = None,
                 on_begin: Callable[[dict[str, Any], Subscriber | None], None] | None = None,
                 ) -> None:
        self._turns: dict[str, LiveTurn] = {}
        self._asks = itertools.count(1)
        self._warning = warning or (lambda name: None)
        self._can_always = can_always or (lambda name: False)
        # Told (summary, starter) as each turn starts: the service pushes it to the other
        # clients, so a second terminal on that conversation follows the reply at once.
        self._on_begin = on_begin

    # -- what the service asks -------------------------------------------------------
    def live_count(self) -> int:
        """Turns still streaming (the service does not idle-exit while one does)."""
        return sum(1 for t in self._turns.values() if t.end is None)

    def live(self) -> list[dict[str, Any]]:
        self._forget_old()
        return [t.summary() for t in self._turns.values()]

    def get(self, turn_id: str) -> LiveTurn | None:
        return self._turns.get(turn_id)

    def for_conversation(self, conversation_id: str) -> LiveTurn | None:
        """The newest turn of that conversation (streaming or just finished)."""
        found = [t for t in self._turns.values() if t.conversation_id == conversation_id]
        return max(found, key=lambda t: t.started_at) if found else None

    # -- running a turn ----------------------------------------------------------------
    def begin(self, turn: Any, starter: Subscriber | None) -> LiveTurn:
        """Start `turn` in the Runtime (its live turns run it) and follow it here."""
        self._forget_old()
        turn_id = getattr(turn, "turn_id", None) or uuid.uuid4().hex[:12]
        live = LiveTurn(turn_id, turn, turn.conversation_id)
        turn.approve = lambda call: self._ask(live, call)
        self._turns[live.turn_id] = live
        live.task = asyncio.ensure_future(self._follow(live))
        if starter is not None:
            self.watch(live, starter)
        if self._on_begin is not None:
            self._on_begin(live.summary(), starter)
        return live

    async def _follow(self, live: LiveTurn) -> None:
        """The hub's own cursor: when the turn ends, pending asks are denied and the end
        is kept for clients that come back to it."""
        finish = "error"
        try:
            async for event in live.turn.events():
                if type(event).__name__ == "Done":
                    finish = event.finish_reason
        except Exception:  # noqa: BLE001 - each watcher's cursor says it; here: the end
            finish = "error"
        finally:
            for future, _ in live.asks.values():
                if not future.done():
                    future.set_result("deny")
            live.ended_at = time.time()
            live.end = {"event": "turn_end", "turn": live.turn_id, "finish_reason": finish,
                        "conversation_id": live.conversation_id,
                        "assistant_message_id": live.turn.assistant_message_id}

    async def _pump(self, live: LiveTurn, watcher: Subscriber) -> None:
        """One client's view: the feed from its first event (compacted), then live, then
        the turn_end line."""
        seq = itertools.count(1)
        finish = "error"

        def send(data: Any) -> None:
            watcher.send({"event": "turn", "turn": live.turn_id, "seq": next(seq), "data": data})

        try:
            async for event in live.turn.events():
                if type(event).__name__ == "Done":
                    finish = event.finish_reason
                send(codec.encode(event))
        except Exception as exc:  # noqa: BLE001 - the turn ends, with a reason, for everyone
            send(codec.encode(_internal_error(exc)))
            send({"$type": "Done", "finish_reason": "error"})
        watcher.send({"event": "turn_end", "turn": live.turn_id, "finish_reason": finish,
                      "conversation_id": live.conversation_id,
                      "assistant_message_id": live.turn.assistant_message_id})

    def watch(self, live: LiveTurn, watcher: Subscriber) -> None:
        """Send the turn to `watcher` from its start, then live (a watcher already posted,
        such as the client that started it, gets nothing twice); approvals waiting for an
        answer are asked of it too."""
        if watcher in live.pumps:
            return
        for future, event in live.asks.values():
            if not future.done():
                watcher.send(dict(event))
        task = asyncio.ensure_future(self._pump(live, watcher))
        live.pumps[watcher] = task
        task.add_done_callback(lambda _: live.pumps.pop(watcher, None)
                               if live.pumps.get(watcher) is task else None)

    def unwatch_all(self, watcher: Subscriber) -> None:
        for live in self._turns.values():
            task = live.pumps.pop(watcher, None)
            if task is not None:
                task.cancel()  # its cursor goes; the turn goes on

    def cancel(self, turn_id: str) -> bool:
        live = self._turns.get(turn_id)
        if live is None:
            return False
        if live.end is None:
            live.turn.cancel()
            for future, _ in live.asks.values():
                if not future.done():
                    future.set_result("deny")
        return True

    # -- approvals ----------------------------------------------------------------------
    async def _ask(self, live: LiveTurn, call: Any) -> str:
        ask_id = f"a{next(self._asks)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        event = {"event": "approve", "turn": live.turn_id, "ask": ask_id,
                 "data": codec.encode(call), "warning": self._warning(call.name),
                 "can_always": self._can_always(call.name)}
        live.asks[ask_id] = (future, event)
        for watcher in list(live.pumps):
            watcher.send(dict(event))
        try:
            return await asyncio.wait_for(asyncio.shield(future), APPROVAL_WAIT_S)
        except TimeoutError:
            return "deny"
        finally:
            live.asks.pop(ask_id, None)

    def answer(self, ask_id: str, decision: str) -> bool:
        for live in self._turns.values():
            entry = live.asks.get(ask_id)
            if entry is not None and not entry[0].done():
                entry[0].set_result(decision)
                return True
        return False

    def _forget_old(self) -> None:
        now = time.time()
        for turn_id, live in list(self._turns.items()):
            if live.end is not None and now - live.ended_at > RETAIN_S and not live.pumps:
                del self._turns[turn_id]

    async def close(self) -> None:
        """Stop every live turn (the service is stopping): each is stored as stopped, and
        each watching client gets its end."""
        for live in list(self._turns.values()):
            if live.end is None:
                live.turn.cancel()
        tasks = [t for live in self._turns.values()
                 for t in (live.task, *live.pumps.values()) if t is not None and not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=10)


def _internal_error(exc: Exception) -> Any:
    from core.events import Error

    return Error("INTERNAL", f"The reply stopped: {type(exc).__name__} in the service "
                 "(see the service log).")
