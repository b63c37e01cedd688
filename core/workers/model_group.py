"""The workers serving one model: its memory, leases, keep-alive, crash blame, affinity.

A model group is what admission counts (held_bytes), what leases and the idle watch
look at (leases, last_used, keep_alive_s, idle), and where a session sticks to the worker
that holds its KV cache. It also remembers which requests were in flight at each crash,
so a request that keeps crashing the model is refused instead of taking it down for all.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from core.engines.base import GenerationRequest, ModelSpec
from core.workers import memory_budget
from core.workers.load_error import WorkerLoadError
from core.workers.status import ModelStatus
from core.workers.turn_hold import people_first
from core.workers.worker_process import WorkerProcess

MAX_SUSPECTS = 256
REFUSE_AFTER = 2  # crashes pinned on one request before it is refused


class ModelGroup:
    """The workers serving one model, and which session sits on which worker."""

    def __init__(self, key: str, spec: ModelSpec, replicas: int, label: str) -> None:
        self.key = key
        self.spec = spec
        self.replicas = replicas
        self.label = label
        self.workers: list[WorkerProcess] = []
        self.affinity: OrderedDict[str, WorkerProcess] = OrderedDict()
        self.failed: str | None = None
        self.failed_code = "LOAD_FAILED"
        self.crash_failed = False  # the restart budget ran out; only an explicit reload clears it
        self.loading: asyncio.Task[None] | None = None
        # Requests that were in flight when a worker crashed, by fingerprint -> crashes.
        self.suspects: OrderedDict[int, int] = OrderedDict()
        # What admission granted: (need, bytes of the budget free then, the budget).
        self.admitted: tuple[memory_budget.Need, int, memory_budget.Budget] | None = None
        # Requests holding the model: from a request's start (a load it waits for included)
        # to its stream's end. A model with leases is never evicted or idle-unloaded, and
        # unload(wait_s=...) waits for them.
        self.leases = 0
        self.person_seen = 0.0  # time.monotonic() of the last interactive request
        self.last_used = time.monotonic()
        # Seconds it stays loaded once idle: None = the pool's idle_unload_s, < 0 = for
        # ever, 0 = unloaded as soon as its last reply ends (Ollama's keep_alive).
        self.keep_alive_s: float | None = None

    def held_bytes(self) -> int:
        """The budget this model holds: its admitted need while a worker of it is up, starting
        or crashed and about to be respawned."""
        up = any(w.state in ("ready", "loading", "crashed") for w in self.workers) or (
            self.loading is not None and not self.loading.done())
        return self.admitted[0].total_bytes if self.admitted is not None and up else 0

    def idle(self) -> bool:
        """Loaded and doing nothing: no request running, queued or waiting for it, no load
        under way."""
        return bool(self.workers) and not self.leases and (
            self.loading is None or self.loading.done()) and all(
            w.state == "ready" and not w.streams and not w.waiting for w in self.workers)

    def idle_deadline(self, default_s: float | None) -> float | None:
        """When (monotonic) this model unloads if it stays idle; None: never."""
        keep = self.keep_alive_s if self.keep_alive_s is not None else default_s
        if keep is None or keep < 0 or keep == float("inf"):
            return None
        return self.last_used + keep

    def idle_left(self, default_keep_s: float | None) -> float | None:
        """Seconds until it unloads if it stays idle (its whole keep-alive while it
        answers); None when it is kept loaded."""
        deadline = self.idle_deadline(default_keep_s)
        if deadline is None:
            return None
        if self.leases:
            return float(self.keep_alive_s if self.keep_alive_s is not None else default_keep_s or 0)
        return max(0.0, deadline - time.monotonic())

    def last_used_wall(self) -> float:
        return time.time() - (time.monotonic() - self.last_used)

    def status(self, default_keep_s: float | None) -> ModelStatus:
        workers = [w.status() for w in self.workers]
        states = {w.state for w in workers}
        state = ("failed" if self.failed and not self._up() else "loading" if "loading" in states
                 or not workers else "busy" if self.leases or "busy" in states else "idle")
        return ModelStatus(
            key=self.key, label=self.label, engine=self.spec.engine, path=self.spec.path,
            state=state, memory_bytes=self.held_bytes(),
            rss_bytes=sum(w.rss_bytes for w in workers), requests=self.leases,
            last_used=self.last_used_wall(), idle_left_s=self.idle_left(default_keep_s),
            error=self.failed if state == "failed" else None)

    def _up(self) -> bool:
        return any(w.state in ("ready", "loading") for w in self.workers)

    def killed_while_loading(self) -> str:
        """The sentence for a worker the system killed (SIGKILL) while it loaded this model."""
        need, free, budget = self.admitted or (memory_budget.UNKNOWN, 0,
                                               memory_budget.current_budget())
        return memory_budget.killed_while_loading(self.label, need, free, budget)

    def blame(self, inflight: list[GenerationRequest]) -> GenerationRequest | None:
        """The request a crash is pinned on, if any, and note every request in flight.

        A crash is one request's doing when that request was the only one in flight, or
        when it was also in flight at an earlier crash. Such crashes do not spend the
        model's restart budget (one client's bad input must not take the model down for
        everyone); a request pinned with two crashes is refused from then on (refusal()).
        """
        culprit = inflight[0] if len(inflight) == 1 else None
        for request in inflight:
            key = _fingerprint(request)
            seen = self.suspects.pop(key, 0)
            if culprit is None and seen:
                culprit = request
            self.suspects[key] = seen + 1
        while len(self.suspects) > MAX_SUSPECTS:
            self.suspects.popitem(last=False)
        return culprit

    def refusal(self, request: GenerationRequest) -> str | None:
        """Why this request is not sent to a worker (it crashed one twice), or None."""
        if not self.suspects or self.suspects.get(_fingerprint(request), 0) < REFUSE_AFTER:
            return None
        return ("This request crashed the model worker twice and is refused, so that the model "
                "stays up for everyone else. Change its messages or tools and send it again.")

    def forget_worker(self, worker: WorkerProcess) -> None:
        for session, w in list(self.affinity.items()):
            if w is worker:
                del self.affinity[session]

    def pick(self, session_id: str | None, max_sessions: int,
             prefix: str | None = None, interactive: bool = False) -> WorkerProcess:
        """The worker for a request: its session's; else the one that last served its
        `prefix` (core.workers.prefix_route) unless that one is busy and another is free;
        else the least loaded, least recently used. While a person is around, an API
        request never takes the replica kept for them (core.workers.turn_hold)."""
        live = [w for w in self.workers if w.state == "ready"]
        if not live:
            raise WorkerLoadError("LOAD_FAILED", self.failed or "No worker is ready for this model.")
        # a replica kept for the person's turns while one is around (core.workers.turn_hold)
        live = people_first(live, interactive, self.person_seen, time.monotonic())
        if session_id is not None:
            worker = self.affinity.get(session_id)
            if worker is not None and worker in live:
                self.affinity.move_to_end(session_id)
                return worker
        elif prefix is not None and len(live) > 1:
            worker = self.affinity.get(prefix)
            if worker is not None and worker in live and (
                    worker.load() == 0 or all(w.load() for w in live)):
                self.affinity.move_to_end(prefix)
                return worker
            session_id = prefix  # remembered below for the next request that shares it
        worker = min(live, key=lambda w: (w.load(), w.last_used))
        if session_id is not None:
            self.affinity[session_id] = worker
            while len(self.affinity) > max_sessions:
                self.affinity.popitem(last=False)
        return worker


def _fingerprint(request: GenerationRequest) -> int:
    """Identifies a request's input (not its id): the same conversation sent again."""
    return hash(repr((request.messages, request.tools, request.prompt)))
