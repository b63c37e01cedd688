"""The service's client asks its start-up calls at once: an app starting up answers each
only when its loop is free, and with six calls in a row the first frame's ~50 ms of
painting came between two of them, so the sidebar showed that much later (bench/ui.py's
client start). The sidebar's first list is asked with them, after the subscriptions, and
answered from there once (a change pushed meanwhile makes it list again)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.config import Settings
from core.runtime import ModelState
from core.service.remote_runtime import RemoteRuntime
from tui.service_runtime import ServiceRuntime

READY = ModelState(label="scripted", state="ready", context_size=4096)
PAGE = ["the first page"]


class ClientMockSlow:
    """A mock of ServiceClient: each answer takes three turns of the loop, and it counts
    how many calls wait at once."""

    connected = True

    def __init__(self) -> None:
        self.listeners: list[Any] = []
        self.sent: list[tuple[str, Any]] = []
        self.waiting = 0
        self.most_waiting = 0

    async def call(self, name: str, /, timeout: float | None = None, **args: Any) -> Any:
        self.sent.append((name, args.get("topic")))
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        for _ in range(3):
            await asyncio.sleep(0)
        self.waiting -= 1
        if name == "subscribe":
            return READY if args["topic"] == "model" else []
        return {"workers": []} if name == "mirror" else PAGE if name == "list_conversations" else None

    async def close(self) -> None:
        pass


async def test_start_asks_its_calls_at_once_and_the_extra_ones_after_subscribing() -> None:
    client = ClientMockSlow()
    remote = RemoteRuntime(client)  # type: ignore[arg-type]
    answers = await remote.start("mirror", "list_conversations")
    assert answers == [{"workers": []}, PAGE]
    assert client.most_waiting == 8  # six subscriptions and settings, the mirror, the list
    names = [name for name, _ in client.sent]
    assert names.index("list_conversations") > max(
        i for i, (name, topic) in enumerate(client.sent) if topic == "conversations")
    assert remote.model == READY


async def test_the_sidebars_first_list_comes_with_start_and_only_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = ClientMockSlow()

    async def connect(name: str) -> ClientMockSlow:
        return client

    monkeypatch.setattr("core.service.start_or_connect", connect)
    runtime = ServiceRuntime(Settings())
    await runtime.start()
    try:
        assert await runtime.list_conversations() is PAGE
        assert [name for name, _ in client.sent].count("list_conversations") == 1
        await runtime.list_conversations()  # the next list is the service's
        assert [name for name, _ in client.sent].count("list_conversations") == 2
        runtime._first_listing = PAGE
        for listener in runtime._remote.conversation_listeners:  # a change pushed
            listener()
        await runtime.list_conversations()
        assert [name for name, _ in client.sent].count("list_conversations") == 3
    finally:
        await runtime.close()
