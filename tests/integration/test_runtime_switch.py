"""Switching the chat model while a reply streams (the hub's `l`, its load after a
download, a conversation's own model): the reply is never cut by the switch.

Real worker processes (the scripted engine replays a reply at a known pace) behind a real
Runtime and store. The new model loads beside the old one when the memory budget holds
both; when it holds one, the switch waits for the reply to end (or for Esc), then the old
model makes room. These fail on the switch that unloaded first: the reply ended with
"unloaded" there.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, Error, TextDelta
from core.runtime import Runtime
from core.workers import memory_budget as mb
from tests.fixtures.sized_models import sized_model_dir

pytestmark = pytest.mark.timeout(120)
REPLY = "word " * 60  # 60 pieces at 30 a second: a reply of 2 s
ENDS_WITHIN_S = 20.0
NEW_MODEL_SAYS = "Hello from the scripted engine."


def streaming_spec(path: str) -> ModelSpec:
    opts = {"label": "first", "reply": REPLY, "tokens_per_s": 30, "chunk_chars": 5}
    return ModelSpec(path=path, engine="scripted", context_size=8192, options=tuple(opts.items()))


def text(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def first_deltas(events, n: int) -> list:
    seen: list = []
    async for event in events:
        seen.append(event)
        if sum(isinstance(e, TextDelta) for e in seen) >= n:
            return seen
    return seen


async def rest(events, seen: list) -> list:
    async def drain() -> None:
        async for event in events:
            seen.append(event)

    await asyncio.wait_for(drain(), ENDS_WITHIN_S)
    return seen


def sized(tmp_path: Path, name: str) -> Path:
    return sized_model_dir(tmp_path / name, weights_bytes=300_000_000, layers=28, heads=16,
                           kv_heads=8, head_dim=128)  # 1.24 GB with its cache at 8,192 tokens


async def test_a_switch_mid_reply_loads_beside_and_the_reply_completes(tmp_path: Path) -> None:
    rt = Runtime(Settings(), model_spec=streaming_spec("first-model"))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a story")
        events = turn.events()
        seen = await first_deltas(events, 3)
        switch = asyncio.ensure_future(rt.switch_model("second-model", "scripted"))
        await rest(events, seen)
        assert seen[-1] == Done("stop") and text(seen) == REPLY  # whole, not cut
        assert not any(isinstance(e, Error) for e in seen)
        assert await asyncio.wait_for(switch, ENDS_WITHIN_S)
        assert sorted(rt.pool.loaded()) == ["chat", rt.model_key]  # both loaded at once
        stored = await rt.store_call(rt.store_handle.get_message, turn.assistant_message_id)
        assert stored.status == "complete" and stored.content == REPLY
        after = await rest((await rt.start_turn(turn.conversation_id, "and now?")).events(), [])
        assert after[-1] == Done("stop") and text(after) == NEW_MODEL_SAYS
        # switching back is instant: the first model is still loaded under its key
        assert await asyncio.wait_for(rt.switch_model("first-model", "scripted"), 5)
    finally:
        await rt.close()


async def test_a_switch_the_budget_cannot_hold_beside_waits_for_the_reply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = sized(tmp_path, "first"), sized(tmp_path, "second")
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "2000")  # one of them, not two
    rt = Runtime(Settings(), model_spec=streaming_spec(str(first)))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a story")
        events = turn.events()
        seen = await first_deltas(events, 3)
        switch = asyncio.ensure_future(rt.switch_model(str(second), "scripted"))
        await asyncio.sleep(0.3)
        assert not switch.done()  # waiting for the reply, not refusing, not cutting it
        await rest(events, seen)
        assert seen[-1] == Done("stop") and text(seen) == REPLY
        assert await asyncio.wait_for(switch, ENDS_WITHIN_S), rt.model.error
        assert rt.pool.loaded() == [rt.model_key] and rt.model_key != "chat"  # first made room
        after = await rest((await rt.start_turn(turn.conversation_id, "and now?")).events(), [])
        assert text(after) == NEW_MODEL_SAYS
    finally:
        await rt.close()


async def test_esc_stops_the_reply_a_waiting_switch_is_waiting_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = sized(tmp_path, "first"), sized(tmp_path, "second")
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "2000")
    slow = ModelSpec(path=str(first), engine="scripted", context_size=8192,
                     options=(("reply", "word " * 400), ("tokens_per_s", 10), ("chunk_chars", 5)))
    rt = Runtime(Settings(), model_spec=slow)
    await rt.start()
    try:
        turn = await rt.start_turn(None, "tell me a long story")
        events = turn.events()
        seen = await first_deltas(events, 2)
        switch = asyncio.ensure_future(rt.switch_model(str(second), "scripted"))
        await asyncio.sleep(0.3)
        turn.cancel()  # Esc
        await rest(events, seen)
        assert seen[-1] == Done("cancelled") and text(seen)
        assert await asyncio.wait_for(switch, ENDS_WITHIN_S), rt.model.error
        stored = await rt.store_call(rt.store_handle.get_message, turn.assistant_message_id)
        assert stored.status == "stopped" and stored.content == text(seen)
    finally:
        await rt.close()
