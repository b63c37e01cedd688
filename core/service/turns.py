"""Turns that live in the service: streamed to every client watching, whoever started them.

A turn runs in its own task here, so it goes on when the client that started it goes
away (its terminal closed, its SSH link dropped) and any client can watch it from the
start (`watch_turn` replays what has streamed so far, text already merged, then goes on
live). Tool approvals are asked of the watching clients; the first answer counts; when
nobody answers within APPROVAL_WAIT_S the call is denied (nothing runs unseen).
A finished turn is kept RETAIN_S for a client that comes back to it.

When the Runtime grows its own live-turn registry (runtime.live_turns / watch_turn),
this module becomes a thin adapter over it.
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
    turn: Any  # core.runtime.Turn
    conversation_id: str
    started_at: float = field(default_factory=time.time)
    history: list[dict[str, Any]] = field(default_factory=list)
    watchers: set[Subscriber] = field(default_factory=set)  # type: ignore[assignment]
    asks: dict[str, tuple[asyncio.Future[str], dict[str, Any]]] = field(default_factory=dict)
    seq: int = 0
    end: dict[str, Any] | None = None
    task: asyncio.Task[None] | None = None
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
        # Told (summary, starter) as each turn starts: the service pushes it to the other
        # clients, so a second terminal on that conversation follows the reply at once.
        self._on_begin = on_begin
        self._asks = itertools.count(1)
        self._warning = warning or (lambda name: None)
        self._can_always = can_always or (lambda name: False)

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
        self._forget_old()
        live = LiveTurn(uuid.uuid4().hex[:12], turn, turn.conversation_id)
        if starter is not None:
            live.watchers.add(starter)
        turn.approve = lambda call: self._ask(live, call)
        self._turns[live.turn_id] = live
        live.task = asyncio.ensure_future(self._run(live))
        if self._on_begin is not None:
            self._on_begin(live.summary(), starter)
        return live

    async def _run(self, live: LiveTurn) -> None:
        finish = "error"
        try:
            async for event in live.turn.events():
                name = type(event).__name__
                if name == "Done":
                    finish = event.finish_reason
                self._publish(live, codec.encode(event))
        except Exception as exc:  # noqa: BLE001 - the turn ends, with a reason, for everyone
            self._publish(live, codec.encode(_internal_error(exc)))
            self._publish(live, {"$type": "Done", "finish_reason": "error"})
        finally:
            for future, _ in live.asks.values():
                if not future.done():
                    future.set_result("deny")
            live.ended_at = time.time()
            live.end = {"event": "turn_end", "turn": live.turn_id, "finish_reason": finish,
                        "conversation_id": live.conversation_id,
                        "assistant_message_id": live.turn.assistant_message_id}
            for watcher in list(live.watchers):
                watcher.send(dict(live.end))

    def _publish(self, live: LiveTurn, data: Any) -> None:
        live.seq += 1
        message = {"event": "turn", "turn": live.turn_id, "seq": live.seq, "data": data}
        last = live.history[-1] if live.history else None
        kind = data.get("$type") if isinstance(data, dict) else None
        if last is not None and kind in ("TextDelta", "ReasoningDelta") \
                and last["data"].get("$type") == kind:
            last["data"] = {"$type": kind, "text": last["data"]["text"] + data["text"]}
            last["seq"] = live.seq  # history holds the reply, not one entry per token
        else:
            live.history.append(dict(message))
        for watcher in list(live.watchers):
            watcher.send(dict(message))

    def watch(self, live: LiveTurn, watcher: Subscriber) -> None:
        """Replay the turn so far to `watcher`, then keep it posted (a watcher already
        posted, such as the client that started it, gets nothing twice)."""
        if watcher in live.watchers:
            return
        for message in live.history:
            watcher.send(dict(message, data=dict(message["data"])))
        for future, event in live.asks.values():
            if not future.done():
                watcher.send(dict(event))
        if live.end is not None:
            watcher.send(dict(live.end))
        else:
            live.watchers.add(watcher)

    def unwatch_all(self, watcher: Subscriber) -> None:
        for live in self._turns.values():
            live.watchers.discard(watcher)

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
        for watcher in list(live.watchers):
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
            if live.end is not None and now - live.ended_at > RETAIN_S:
                del self._turns[turn_id]

    async def close(self) -> None:
        """Stop every live turn (the service is stopping): each is stored as stopped."""
        for live in list(self._turns.values()):
            if live.end is None:
                live.turn.cancel()
        tasks = [t.task for t in self._turns.values() if t.task is not None and not t.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=10)


def _internal_error(exc: Exception) -> Any:
    from core.events import Error

    return Error("INTERNAL", f"The reply stopped: {type(exc).__name__} in the service "
                 "(see the service log).")
