"""The subscribe answer and the model push right after it can arrive in one read: the
client's reader handles the push ("ready") before the subscribing coroutine resumes with
the answer ("loading"), which must not then win (seen in the full suite: an app's header
stayed "loading" 30 s after its service's model was ready)."""

from __future__ import annotations

from typing import Any

from core.runtime import ModelState
from core.service import codec
from core.service.remote_runtime import RemoteRuntime

LOADING = ModelState(label="scripted", state="loading")
READY = ModelState(label="scripted", state="ready", context_size=4096)


class FakeClientPushFirst:
    """A mock of ServiceClient: its reader hands on the push that followed the answer
    before the caller resumes, as the real one does when both lines come in one read."""

    def __init__(self, push_during_subscribe: bool) -> None:
        self.listeners: list[Any] = []
        self.push = push_during_subscribe

    async def call(self, name: str, **args: Any) -> Any:
        if name == "subscribe" and args.get("topic") == "model":
            if self.push:
                for listener in list(self.listeners):
                    listener({"event": "model", "data": codec.encode(READY)})
            return LOADING
        return [] if name == "subscribe" else None


async def test_a_model_push_heard_during_subscribe_is_not_overwritten_by_its_answer() -> None:
    remote = RemoteRuntime(FakeClientPushFirst(push_during_subscribe=True))
    told: list[Any] = []
    remote.listeners.append(told.append)
    await remote.start()
    assert remote.model == READY and told == [READY]


async def test_without_a_push_the_answer_is_the_state() -> None:
    remote = RemoteRuntime(FakeClientPushFirst(push_during_subscribe=False))
    await remote.start()
    assert remote.model == LOADING
