"""Admission: a model's memory is checked against the budget before any worker of it starts.

What a load needs (weights + KV cache at its context: core.workers.memory_budget) against
what the budget has free once every holder's share is counted. Holders are the pool's
chat models and anything else that keeps a model in memory (the vision model, the
embeddings reader). When the need does not fit, idle holders are unloaded, least recently
used first; when only holders answering now stand in the way, a load may wait for their
leases to end (a switch mid-reply); otherwise it is refused at once (OOM) with the
numbers. One decision at a time, so two loads never both count the same free bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from core.engines.base import ModelSpec
from core.workers import memory_budget
from core.workers.leases import Leases
from core.workers.load_error import WorkerLoadError


class Holder(Protocol):
    """Something that holds part of the memory budget while its model is loaded."""

    label: str
    last_used: float  # time.monotonic() of its last use: the least recent goes first

    def held_bytes(self) -> int: ...

    def idle(self) -> bool: ...


def measure(spec: ModelSpec, replicas: int) -> tuple[memory_budget.Need, memory_budget.Budget]:
    """What loading `spec` with `replicas` workers needs, and the budget in force (reads
    files: call it off the loop). A draft model (speculative decoding's second model) is
    loaded in the same worker, so its weights and cache count with the model's."""
    need = memory_budget.model_need(
        spec.path, spec.context_size, engine=spec.engine, replicas=replicas,
        prefill_chunk=int(spec.option("prefill_step_size", memory_budget.PREFILL_CHUNK)))
    draft = spec.option("draft_model")
    if draft and need.known:
        extra = memory_budget.model_need(str(draft), spec.context_size, engine=spec.engine,
                                         replicas=replicas)
        if extra.known:
            need = memory_budget.Need(need.weights_bytes + extra.weights_bytes,
                                      need.kv_bytes + extra.kv_bytes, need.context,
                                      need.workers, draft_bytes=extra.total_bytes)
    return need, memory_budget.current_budget()


class Admission:
    """Decides, one load at a time, whether a holder's need fits, making room if it can."""

    def __init__(self, holders: Callable[[], Iterable[Holder]],
                 evict: Callable[[Holder], Awaitable[None]], leases: Leases) -> None:
        self._holders = holders  # every holder known now (the one being admitted included)
        self._evict = evict  # unloads an idle holder to make room
        self._leases = leases
        self._lock = asyncio.Lock()

    async def admit(self, holder: Holder, need: memory_budget.Need, budget: memory_budget.Budget,
                    wait_s: float = 0.0) -> int:
        """The budget's free bytes (before `need`) once it fits; raises WorkerLoadError(OOM)
        with the numbers when it cannot. `wait_s`: how long to wait for busy holders'
        replies to end when only they stand in the way (0 refuses at once)."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            async with self._lock:
                free = await self._make_room(holder, need, budget, time.monotonic() < deadline)
                if free is not None:
                    return free
            try:  # a reply in the way: wait for a lease to end, then decide again
                await self._leases.wait(deadline - time.monotonic())
            except TimeoutError:
                pass

    async def _make_room(self, holder: Holder, need: memory_budget.Need,
                         budget: memory_budget.Budget, may_wait: bool) -> int | None:
        """The budget's free bytes once `need` fits (idle holders evicted, least recently
        used first); None when it would fit once busy holders are done and `may_wait`;
        otherwise the load is refused."""
        while True:
            others = [h for h in self._holders() if h is not holder and h.held_bytes()]
            free = budget.total_bytes - sum(h.held_bytes() for h in others)
            if not need.known or need.total_bytes <= free:
                return free
            idle = sorted((h for h in others if h.idle()), key=lambda h: h.last_used)
            idle_bytes = sum(h.held_bytes() for h in idle)
            if need.total_bytes > free + idle_bytes:
                busy = sum(h.held_bytes() for h in others if h not in idle)
                if may_wait and need.total_bytes <= free + idle_bytes + busy:
                    return None
                raise WorkerLoadError("OOM", memory_budget.refusal(
                    holder.label, need, free, budget, busy))
            await self._evict(idle[0])
