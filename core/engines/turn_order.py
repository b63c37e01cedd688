"""The order an engine that runs one reply at a time serves its requests in (issue 45).

llama.cpp (and the scripted engine's serial mode) generate one reply per worker, so a
person's turn that arrives while an API reply runs would wait for all of it. Here the
running reply is set aside at a token boundary when a request of a higher rank waits,
and resumed later as a continuation of itself: its client sees one unbroken stream.

Ranks: a person's turn in the app (`interactive`) over an API request over a request
made beside a conversation (`aside`: a summary written ahead, its cache warmed).
Bounds, so API traffic always finishes: an API reply is set aside at most MAX_PAUSES
times, and once set aside, at most TURNS_PER_RESUME higher-ranked requests start before it
resumes. Work beside a conversation has no such bound: it goes on whenever nothing else
waits (the runtime never waits for it: core.memory.ahead). Within a rank, first come, first served; a reply set aside goes before queued
requests of its own rank (it started first).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.engines.base import GenerationRequest

MAX_PAUSES = 4  # a reply is set aside at most this often over its life
TURNS_PER_RESUME = 3  # requests started ahead of a reply set aside before it resumes

State = TypeVar("State")


def rank(request: GenerationRequest) -> int:
    """2: a person waits for it; 1: an API request; 0: work beside a conversation."""
    if request.interactive:
        return 2
    return 0 if request.aside else 1


@dataclass
class Aside(Generic[State]):
    """A reply set aside at a token boundary: the engine's state for resuming it."""

    request: GenerationRequest
    state: State
    overtaken: int = 0  # requests started while it waited


class TurnOrder(Generic[State]):
    """The queue of an engine that runs one reply at a time, with replies set aside.

    `queue` is the engine's own deque of requests not started (submit appends to it;
    a cancel may remove from it): this only decides what runs next."""

    def __init__(self, queue: deque[GenerationRequest]) -> None:
        self.queue = queue
        self.aside: list[Aside[State]] = []
        self._pauses: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.queue or self.aside)

    def should_yield(self, running: GenerationRequest) -> bool:
        """True when a queued request outranks the running one and it may still be set
        aside (its MAX_PAUSES not spent)."""
        if not self.queue:
            return False
        if rank(running) and self._pauses.get(running.request_id, 0) >= MAX_PAUSES:
            return False
        top = max(rank(r) for r in self.queue)
        return top > rank(running)

    def set_aside(self, request: GenerationRequest, state: State) -> None:
        self._pauses[request.request_id] = self._pauses.get(request.request_id, 0) + 1
        self.aside.append(Aside(request, state))

    def next(self) -> tuple[GenerationRequest, State | None] | None:
        """What runs now: (a queued request, None) to start, or (a reply set aside, its
        state) to resume; None when nothing waits."""
        overdue = next((a for a in self.aside
                        if rank(a.request) and a.overtaken >= TURNS_PER_RESUME), None)
        best_aside = max(self.aside, key=lambda a: rank(a.request), default=None)
        best_new = None
        for request in self.queue:  # first of the highest rank
            if best_new is None or rank(request) > rank(best_new):
                best_new = request
        if overdue is None and best_new is not None and (
                best_aside is None or rank(best_new) > rank(best_aside.request)):
            self.queue.remove(best_new)
            for a in self.aside:
                a.overtaken += 1
            return best_new, None
        chosen = overdue or best_aside
        if chosen is None:
            return None
        self.aside.remove(chosen)
        return chosen.request, chosen.state

    def take_aside(self, request_id: str) -> Aside[State] | None:
        """Remove a reply set aside (it was cancelled); None when none has this id."""
        for a in self.aside:
            if a.request.request_id == request_id:
                self.aside.remove(a)
                self._pauses.pop(request_id, None)
                return a
        return None

    def finished(self, request_id: str) -> None:
        """The reply ended: its count of pauses is forgotten."""
        self._pauses.pop(request_id, None)
