"""What the service tells every client without being asked: notices and sidebar changes.

A notice is a sentence for the person at any client (the history database was damaged
and moved aside, with where it went; a model loaded or unloaded; a download finished):

    {"event": "notice", "data": {"kind": "store", "title": "History", "severity":
     "warning", "message": "...", "at": 1700000000.0}}     (topic "notices")

A sticky notice (the database moved aside at the service's start) is also the answer to
subscribing, so a client that connects later is told too. A call that creates, renames,
deletes or titles a conversation (or moves it up the list: a new message) is followed by

    {"event": "conversations"}                               (topic "conversations")

and every other client lists its sidebar again: the service pushes, nobody polls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

# Calls after which the sidebar may read differently (a conversation made, renamed,
# deleted, titled by its first message, or moved to the top by a new message).
CONVERSATION_CALLS = frozenset({
    "start_turn", "regenerate", "edit_and_resend", "compare", "compare_keep", "attach",
    "rename_conversation", "delete_conversation", "delete_message", "step_branch",
    "run_python",
})
MAX_STICKY = 8

Broadcast = Callable[..., None]  # ServiceServer.broadcast(message, topic, but=session)


class Notices:
    """The service's notices and "conversations changed" pushes, for its clients."""

    def __init__(self, broadcast: Broadcast) -> None:
        self._broadcast = broadcast
        self.sticky: list[dict[str, Any]] = []
        self._models: set[str] | None = None

    def say(self, kind: str, message: str, *, title: str = "", severity: str = "information",
            sticky: bool = False) -> None:
        """Tell every client subscribed to "notices" (and later ones too, when sticky)."""
        data = {"kind": kind, "title": title, "severity": severity, "message": message,
                "at": time.time()}
        if sticky:
            self.sticky = [*self.sticky, data][-MAX_STICKY:]
        self._broadcast({"event": "notice", "data": data}, "notices")

    def conversations_changed(self, but: Any = None) -> None:
        self._broadcast({"event": "conversations"}, "conversations", but=but)

    def after_call(self, name: Any, caller: Any = None) -> None:
        """A call ended well: the other clients list their sidebars again when it changed
        things (the caller lists its own as it goes on, as the in-process app does)."""
        if name in CONVERSATION_CALLS:
            self.conversations_changed(but=caller)

    def models_now(self, loaded: Iterable[str]) -> None:
        """The pool's loaded models now (every second): a model that came or went is told
        (an idle unload or an eviction to make room is otherwise invisible elsewhere)."""
        now = set(loaded)
        before, self._models = self._models, now
        if before is None:
            return
        for name in sorted(now - before):
            self.say("model", f"Model loaded: {_short(name)}.", title="Model")
        for name in sorted(before - now):
            self.say("model", f"Model unloaded: {_short(name)} (idle, or to make room for "
                     "another); it loads again when asked.", title="Model")


def forward_memory(runtime: Any, broadcast: Broadcast) -> Callable[[str, str], None]:
    """Push the chat context's memory stages (Runtime.memory_listeners: "summarising",
    "done", "describing …") to the clients subscribed to "memory", so an app shows the
    summary's wait as it does in process; returns the listener, to remove at close."""
    def forward(conversation_id: str, stage: str) -> None:
        broadcast({"event": "memory", "data": {"conversation_id": conversation_id,
                                                "stage": stage}}, "memory")

    runtime.memory_listeners.append(forward)
    return forward


def _short(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1] or model
