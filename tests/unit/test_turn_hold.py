"""Which workers the pool interrupts for a person's turn (core.workers.turn_hold): the
step in flight of an API reply stops (core.engines.llama_abort), a person's never.

Stand-in workers (FakeWorker: the pool's side only, no process); the worker's and the
engine's side run for real in tests/integration/test_llama_abort.py. Before, nothing
was interrupted: a held replica ran its step in flight to its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.engines.base import GenerationRequest, SamplingParams
from core.workers import protocol as p
from core.workers.request_stream import RequestStream
from core.workers.turn_hold import hold_others, interrupt_api


@dataclass
class FakeGroup:
    workers: list[Any] = field(default_factory=list)


@dataclass
class FakeWorker:
    group: FakeGroup
    streams: dict[str, RequestStream] = field(default_factory=dict)
    state: str = "ready"
    info: dict[str, Any] = field(default_factory=lambda: {"preempts": True})
    sent: list[tuple] = field(default_factory=list)
    interrupted: int = 0

    def send(self, msg: tuple) -> None:
        self.sent.append(msg)

    def interrupt(self) -> None:
        self.interrupted += 1


def _stream(rid: str, interactive: bool) -> RequestStream:
    return RequestStream(GenerationRequest(rid, ({"role": "user", "content": "hi"},),
                                           SamplingParams(), interactive=interactive))


def _workers(*running: tuple[str, bool]) -> list[FakeWorker]:
    group = FakeGroup()
    for rid, interactive in running:
        worker = FakeWorker(group)
        if rid:
            worker.streams[rid] = _stream(rid, interactive)
        group.workers.append(worker)
    return group.workers


def test_held_replicas_running_api_replies_are_interrupted() -> None:
    kept, api, person, idle = _workers(("turn", True), ("api", False), ("other", True), ("", False))
    held = hold_others(kept)
    assert held == [api]
    assert api.sent == [(p.HOLD, 2.0)] and api.interrupted == 1
    assert person.interrupted == idle.interrupted == kept.interrupted == 0


def test_a_turn_sent_to_a_worker_running_an_api_reply_interrupts_it() -> None:
    worker, = _workers(("api", False))
    worker.streams["turn"] = _stream("turn", True)
    interrupt_api(worker)
    assert worker.interrupted == 1
    alone, = _workers(("turn", True))  # a person's turn only: nothing to cut
    interrupt_api(alone)
    assert alone.interrupted == 0
