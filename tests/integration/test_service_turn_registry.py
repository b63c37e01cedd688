"""The service's TurnHub is an adapter over the Runtime's live turns (core.runtime.live):
one registry, one copy of each reply's events. The turn the hub streams is the one the
Runtime lists (same id), and a client watching late gets the reply from the turn's own
feed, compacted, then its end."""

from __future__ import annotations

import asyncio
from typing import Any

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from core.service.turns import TurnHub

REPLY = "one two three four five six seven eight"


class Recording:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def text(self) -> str:
        return "".join(m["data"].get("text", "") for m in self.messages
                       if m.get("event") == "turn" and m["data"].get("$type") == "TextDelta")


async def test_the_hub_streams_the_runtimes_own_live_turn() -> None:
    spec = ModelSpec(path="scripted", engine="scripted", options=(
        ("reply", REPLY), ("fixed_timing", True), ("tokens_per_s", 40), ("chunk_chars", 4)))
    rt = Runtime(Settings(), model_spec=spec)
    await rt.start()
    hub = TurnHub()
    try:
        starter = Recording()
        turn = await rt.start_turn(None, "count")
        live = hub.begin(turn, starter)
        for _ in range(200):
            if rt.live_turns():
                break
            await asyncio.sleep(0.01)
        assert [i.turn_id for i in rt.live_turns()] == [live.turn_id], "one registry, one id"
        assert not hasattr(live, "history"), "the events are kept once, in the turn's feed"
        await asyncio.wait_for(live.task, 60)
        for _ in range(200):
            if starter.messages and starter.messages[-1].get("event") == "turn_end":
                break
            await asyncio.sleep(0.01)
        late = Recording()
        hub.watch(live, late)  # finished, kept for a client that comes back
        for _ in range(200):
            if late.messages and late.messages[-1].get("event") == "turn_end":
                break
            await asyncio.sleep(0.01)
        assert starter.text() == late.text() == REPLY
        assert late.messages[-1]["finish_reason"] == "stop"
        deltas = [m for m in late.messages if m.get("event") == "turn"
                  and m["data"].get("$type") == "TextDelta"]
        assert len(deltas) == 1, "the past comes compacted: the text so far as one piece"
    finally:
        await hub.close()
        await rt.close()
