"""Requests without a session go to the replica that served their prefix (issue 43 item
6): the key, and ModelGroup.pick's choice between replicas."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.engines.base import GenerationRequest, ModelSpec
from core.workers.model_group import ModelGroup
from core.workers.prefix_route import prefix_key

TOOLS = ({"type": "function", "function": {"name": "read", "parameters": {}}},)


def _ask(system: str, question: str, tools: tuple[dict[str, Any], ...] = TOOLS) -> GenerationRequest:
    return GenerationRequest("r", ({"role": "system", "content": system},
                                   {"role": "user", "content": question}), tools=tools)


def test_requests_that_start_alike_share_a_key() -> None:
    assert prefix_key(_ask("You are an agent.", "a")) == prefix_key(_ask("You are an agent.", "b"))
    assert prefix_key(_ask("You are an agent.", "a")) != prefix_key(_ask("You are a poet.", "a"))
    assert prefix_key(_ask("You are an agent.", "a")) != prefix_key(_ask("You are an agent.", "a", ()))
    raw = GenerationRequest("r", (), prompt="x" * 5000 + "tail one")
    assert prefix_key(raw) == prefix_key(GenerationRequest("r", (), prompt="x" * 5000 + "two"))


@dataclass
class FakeWorker:
    """A stand-in for WorkerProcess: only what pick reads."""

    name: str
    busy: int = 0
    last_used: float = 0.0
    state: str = "ready"
    streams: dict[str, Any] = field(default_factory=dict)

    def load(self) -> int:
        return self.busy


def _group(*workers: FakeWorker) -> ModelGroup:
    group = ModelGroup("m", ModelSpec("m", "scripted"), len(workers), "m")
    group.workers = list(workers)  # type: ignore[list-item]
    return group


def test_a_prefix_goes_back_to_its_replica_unless_it_is_busy_and_another_is_free() -> None:
    a, b = FakeWorker("a", last_used=1.0), FakeWorker("b", last_used=2.0)
    group = _group(a, b)
    assert group.pick(None, 64, "prefix:1") is a  # least recently used, remembered
    a.last_used = 3.0
    assert group.pick(None, 64, "prefix:1") is a  # not b, the least recently used now
    assert group.pick(None, 64, "prefix:2") is b
    a.busy = 1
    assert group.pick(None, 64, "prefix:1") is b  # a is busy, b is free: b, remembered
    b.busy = 1
    assert group.pick(None, 64, "prefix:1") is b  # all busy: where the prefix is
    assert group.pick("session", 64, "prefix:1") in (a, b)  # a session decides alone
