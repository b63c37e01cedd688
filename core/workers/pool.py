"""WorkerPool: spawns, feeds, watches and respawns the worker processes.

Lives in the app process on its asyncio loop. Pipes are read with `loop.add_reader`, so
the loop never blocks on a worker. A worker that dies fails its open requests with
Error(WORKER_CRASHED) at once (its process sentinel wakes the loop), and is respawned
within a restart budget. Sessions stick to the worker that holds their KV cache.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import itertools
import multiprocessing as mp
import os
import signal
import sys
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from typing import Any

from core.engines.base import GenerationRequest, ModelSpec
from core.events import Done, Error, Event, ReasoningDelta, TextDelta
from core.workers import memory_budget
from core.workers import protocol as p
from core.workers.admission import Admission, measure
from core.workers.idle_unload import IdleUnloader
from core.workers.leases import Leases
from core.workers.load_error import WorkerLoadError
from core.workers.on_demand import OnDemandProcess
from core.workers.status import ModelStatus, WorkerStatus
from core.workers.worker_main import worker_main

__all__ = ["ModelStatus", "WorkerLoadError", "WorkerPool", "WorkerStatus"]

_CTX = mp.get_context("spawn")
_ALL_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


class _Stream:
    """Events of one request on their way to its consumer.

    A deque and one waiter future: cheaper per token than asyncio.Queue, which matters
    when one worker step fans out to dozens of streams.
    """

    __slots__ = ("items", "waiter", "done", "request", "worker")

    def __init__(self, request: GenerationRequest | None = None) -> None:
        self.items: deque[Event] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.done = False
        self.request = request  # kept to say which request a crash happened on
        self.worker: _Worker | None = None  # set once it runs on one (for cancel)

    def put(self, event: Event) -> None:
        self.items.append(event)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self, *events: Event) -> None:
        """Close the stream from the app side (cancel, unload, shutdown): the events
        already queued stay in front, so the text so far reaches the consumer."""
        if self.done:
            return
        for event in events:
            self.put(event)
        self.done = True

    async def get_all(self) -> list[Event]:
        """Everything queued, in order; waits only when nothing is. A consumer that fell
        behind gets the backlog at once (the server merges it into fewer chunks)."""
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        items = list(self.items)
        self.items.clear()
        return items


class _Worker:
    """One worker process and the requests in flight on it."""

    def __init__(self, pool: WorkerPool, group: _ModelGroup, index: int, replica: int = 0) -> None:
        self.pool = pool
        self.group = group
        self.worker_id = f"{group.key}#{index}"
        self.replica = replica  # its place among the model's replicas (0 .. replicas - 1)
        self.process: Any = None
        self.conn: Any = None
        self.state = "loading"
        self.info: dict[str, Any] = {}
        self.streams: dict[str, _Stream] = {}  # running on the worker
        self.queue: dict[str, _Stream] = {}  # waiting for a free slot on it
        self.slots = asyncio.Semaphore(1)
        self.waiting = 0
        self.stop_reason: str | None = None  # why the pool stopped it (unload, shutdown)
        self.restarts = 0
        self.restart_times: deque[float] = deque()
        self.error: str | None = None
        self.token_times: deque[tuple[float, int]] = deque()
        self.last_used = time.monotonic()
        self.fatal = False  # the worker reported an internal error before exiting
        self._loaded: asyncio.Future[dict[str, Any]] | None = None
        self.settled: asyncio.Future[None] | None = None  # done when start() has finished

    # -- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        self.settled = asyncio.get_running_loop().create_future()
        try:
            await self._start()
        finally:
            if not self.settled.done():
                self.settled.set_result(None)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        parent_conn, child_conn = _CTX.Pipe(duplex=True)
        self.process = _CTX.Process(
            target=worker_main,
            args=(child_conn, self.worker_spec(), os.getpid()),
            name=f"llmdeck-worker-{self.worker_id}",
            daemon=True,
        )
        self.state = "loading"
        self.error = None
        self.fatal = False
        self.stop_reason = None
        self._loaded = loop.create_future()
        self.process.start()
        child_conn.close()
        self.conn = parent_conn
        loop.add_reader(self.conn.fileno(), self._on_readable)
        loop.add_reader(self.process.sentinel, self._on_exit)
        try:
            self.info = await asyncio.wait_for(
                asyncio.shield(self._loaded), timeout=self.pool.load_timeout_s
            )
        except TimeoutError:
            self._detach()
            self._kill()
            self.state = "failed"
            self.error = (
                f"The model did not finish loading within {self.pool.load_timeout_s:.0f} s "
                "and was stopped. Check that the file is a valid model and that memory is free."
            )
            raise WorkerLoadError("TIMEOUT", self.error) from None
        self.slots = asyncio.Semaphore(int(self.info.get("max_concurrency", 1)))
        self.state = "ready"

    def worker_spec(self) -> ModelSpec:
        """The model's spec plus where this worker stands among its replicas: a llama.cpp
        worker takes its share of the cores (core.engines.llama_params). The model's own
        options come after, so an explicit setting (threads, replicas) still wins."""
        spec = self.group.spec
        ours = (("replicas", self.group.replicas), ("replica", self.replica))
        return dataclasses.replace(spec, options=ours + tuple(spec.options))

    def _detach(self) -> None:
        loop = asyncio.get_running_loop()
        for fd in (self._fileno(), self._sentinel()):
            if fd is not None:
                loop.remove_reader(fd)

    def _fileno(self) -> int | None:
        try:
            return self.conn.fileno() if self.conn and not self.conn.closed else None
        except OSError:
            return None

    def _sentinel(self) -> int | None:
        return self.process.sentinel if self.process is not None else None

    def _kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=2)

    def stop_streams(self, reason: str) -> None:
        """The pool stops this worker on purpose: every request on it or queued for it
        ends now with `reason` (its text so far kept), and a load under way fails."""
        self.stop_reason = reason
        for stream in [*self.streams.values(), *self.queue.values()]:
            stream.end(Error("CANCELLED", reason), Done("error"))
        self.streams.clear()
        self.queue.clear()
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(WorkerLoadError("LOAD_FAILED", reason))
            self._loaded.exception()  # retrieved here: start() gets it through wait_for

    # -- pipe ------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            while self.conn.poll():
                self._dispatch(self.conn.recv())
        except (EOFError, OSError):
            self._on_exit()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == p.STEP:
            now = time.monotonic()
            tokens = 0
            for request_id, events in msg[1]:
                stream = self.streams.get(request_id)
                if stream is None:
                    continue
                if type(events) is str:  # the compact form of a lone TextDelta
                    stream.put(TextDelta(events))
                    tokens += 1
                    continue
                for event in events:
                    stream.put(event)
                    if isinstance(event, TextDelta | ReasoningDelta):
                        tokens += 1
                    elif isinstance(event, Done):
                        stream.done = True
                        self.streams.pop(request_id, None)
            if tokens:
                self.token_times.append((now, tokens))
        elif kind == p.LOADED:
            if self._loaded and not self._loaded.done():
                self._loaded.set_result(msg[1])
        elif kind == p.LOAD_FAILED:
            if self._loaded and not self._loaded.done():
                self._loaded.set_exception(WorkerLoadError(msg[1], msg[2]))
        elif kind == p.FATAL:
            self.error = "The worker hit an internal error and stopped."
            self.fatal = True

    def _on_exit(self) -> None:
        """The process ended: fail its requests now, then respawn within the budget."""
        if self.state in ("crashed", "stopped", "failed"):
            return
        self._detach()
        if self._loaded and not self._loaded.done():
            if self.process is not None:
                self.process.join(timeout=1.0)
            code = self.process.exitcode if self.process else None
            if code == -signal.SIGKILL:  # the system's OOM killer, almost always: say so
                error = WorkerLoadError("OOM", self.group.killed_while_loading())
            else:
                error = WorkerLoadError("LOAD_FAILED", f"The worker exited while loading (exit code {code}).")
            self._loaded.set_exception(error)
            self.state = "failed"
            return
        if self.pool.closing:
            self.state = "stopped"
            self.stop_streams(CLOSING)
            return
        self.process.join(timeout=0.1)
        code = self.process.exitcode
        self.state = "crashed"
        cause = self._cause(code)
        culprit = self.group.blame([st.request for st in self.streams.values() if st.request])
        for stream in self.streams.values():
            if culprit is None:
                message = f"The model worker {cause}."
            elif stream.request is culprit:
                message = f"The model worker {cause} while generating this request."
            else:
                message = f"The model worker {cause} while generating another request."
            stream.put(Error("WORKER_CRASHED", message + " The reply so far was kept; send again "
                             "to retry."))
            stream.put(Done("error"))
            stream.done = True
        self.streams.clear()
        self.group.forget_worker(self)
        self.pool._schedule_respawn(self, counted=culprit is None)

    def _cause(self, code: int | None) -> str:
        """What happened to the process, in words (exit code 0 means it reported an error)."""
        if self.fatal or code == 0:
            return "hit an internal error and stopped"
        if code is not None and code < 0 and -code == 9:
            return "was killed (out of memory, or stopped by the system)"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"crashed ({name})"
        return f"stopped unexpectedly (exit code {code})"

    def send(self, msg: tuple) -> None:
        self.conn.send(msg)

    # -- status ----------------------------------------------------------------
    def tokens_per_s(self, window: float = 10.0) -> float:
        cutoff = time.monotonic() - window
        while self.token_times and self.token_times[0][0] < cutoff:
            self.token_times.popleft()
        return sum(n for _, n in self.token_times) / window

    def load(self) -> int:
        return len(self.streams) + self.waiting

    def status(self) -> WorkerStatus:
        rss = 0
        pid = self.process.pid if self.process is not None else None
        if pid and self.state not in ("crashed", "failed", "stopped"):
            try:
                import psutil

                rss = psutil.Process(pid).memory_info().rss
            except Exception:
                rss = 0
        state = self.state
        if state == "ready":
            state = "busy" if self.streams else "idle"
        return WorkerStatus(
            worker_id=self.worker_id,
            model=self.group.label,
            engine=self.group.spec.engine,
            state=state,
            pid=pid,
            rss_bytes=rss,
            active=len(self.streams),
            queued=self.waiting,
            tokens_per_s=self.tokens_per_s(),
            restarts=self.restarts,
            error=self.error,
            memory_bytes=self.group.held_bytes() // max(1, len(self.group.workers)),
            last_used=self.group.last_used_wall(),
            idle_left_s=self.group.idle_left(self.pool.idle_unload_s),
            path=self.group.spec.path,
            threads=_whole(self.info.get("threads")),
        )


class _ModelGroup:
    """The workers serving one model, and which session sits on which worker."""

    def __init__(self, key: str, spec: ModelSpec, replicas: int, label: str) -> None:
        self.key = key
        self.spec = spec
        self.replicas = replicas
        self.label = label
        self.workers: list[_Worker] = []
        self.affinity: OrderedDict[str, _Worker] = OrderedDict()
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
        while len(self.suspects) > _MAX_SUSPECTS:
            self.suspects.popitem(last=False)
        return culprit

    def refusal(self, request: GenerationRequest) -> str | None:
        """Why this request is not sent to a worker (it crashed one twice), or None."""
        if not self.suspects or self.suspects.get(_fingerprint(request), 0) < _REFUSE_AFTER:
            return None
        return ("This request crashed the model worker twice and is refused, so that the model "
                "stays up for everyone else. Change its messages or tools and send it again.")

    def forget_worker(self, worker: _Worker) -> None:
        for session, w in list(self.affinity.items()):
            if w is worker:
                del self.affinity[session]

    def pick(self, session_id: str | None, max_sessions: int) -> _Worker:
        live = [w for w in self.workers if w.state == "ready"]
        if not live:
            raise WorkerLoadError("LOAD_FAILED", self.failed or "No worker is ready for this model.")
        if session_id is not None:
            worker = self.affinity.get(session_id)
            if worker is not None and worker in live:
                self.affinity.move_to_end(session_id)
                return worker
        worker = min(live, key=lambda w: (w.load(), w.last_used))
        if session_id is not None:
            self.affinity[session_id] = worker
            while len(self.affinity) > max_sessions:
                self.affinity.popitem(last=False)
        return worker


class WorkerPool:
    """All worker processes of the app, keyed by model."""

    def __init__(
        self,
        *,
        load_timeout_s: float = 180.0,
        max_restarts: int = 3,
        restart_window_s: float = 300.0,
        max_sessions_per_model: int = 256,
        idle_unload_s: float | None = None,
    ) -> None:
        self.load_timeout_s = load_timeout_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.max_sessions = max_sessions_per_model
        self.idle_unload_s = idle_unload_s
        self.closing = False
        self._groups: dict[str, _ModelGroup] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open: dict[str, _Stream] = {}  # every request from its start to its end
        self._idle = IdleUnloader(lambda: self._groups.values(),
                                  lambda g: self._evict(g, IDLE_UNLOADED),
                                  lambda: self.idle_unload_s, lambda: self.closing)
        self._leases = Leases(on_last_end=self._idle.wake)
        # Children outside the pool that hold a model (the vision model, the embeddings
        # reader): counted by admission beside the chat models (core.workers.on_demand).
        self._outside: dict[int, OnDemandProcess] = {}
        self._admission = Admission(lambda: [*self._groups.values(), *self._outside.values()],
                                    self._make_room_from, self._leases)
        _ALL_POOLS.add(self)
        _start_resource_tracker()

    # -- models ----------------------------------------------------------------
    async def load(self, key: str, spec: ModelSpec, *, replicas: int = 1, label: str | None = None,
                   wait_s: float = 0.0) -> dict[str, Any]:
        """Start the workers for a model (if not running) and wait until they are ready.

        `wait_s`: when the model fits the budget only once models answering now are done
        (a switch mid-reply), wait up to this long for their replies to end, then unload
        the least recently used of them; 0 refuses such a load at once."""
        group = self._groups.get(key)
        if group is None or group.spec != spec:
            if group is not None:
                await self.unload(key)
            group = _ModelGroup(key, spec, replicas, label or key)
            self._groups[key] = group
        elif label:
            group.label = label
        if group.loading is None or group.loading.done() and not self._ready(group):
            group.failed = None
            group.loading = asyncio.ensure_future(self._admit_then_start(group, wait_s))
            # Its failure reaches every caller through the shield below; when every caller
            # went away (a cancelled load, then close) nobody would read it and asyncio would
            # log "Task exception was never retrieved": it is read here.
            group.loading.add_done_callback(_read_outcome)
        await asyncio.shield(group.loading)
        group.last_used = time.monotonic()
        self._idle.ensure()
        return dict(group.workers[0].info) if group.workers else {}

    async def _admit_then_start(self, group: _ModelGroup, wait_s: float = 0.0) -> None:
        """No worker starts before the model has room in the memory budget."""
        try:
            await self._admit(group, wait_s)
        except WorkerLoadError as err:
            group.failed, group.failed_code = err.message, err.code
            raise
        try:
            await self._start_workers(group)
        finally:
            self._leases.changed()  # a load that ends may let a waiting admission decide

    async def _admit(self, group: _ModelGroup, wait_s: float = 0.0) -> None:
        """Room in the budget for the model (core.workers.admission), or WorkerLoadError."""
        need, budget = await asyncio.to_thread(measure, group.spec, group.replicas)
        free = await self._admission.admit(group, need, budget, wait_s)
        group.admitted = (need, free, budget)

    async def _make_room_from(self, victim: Any) -> None:
        """Unload an idle holder for another load: a chat model's workers stop (it loads
        again on its next request); a child outside the pool stops until its next use."""
        if isinstance(victim, _ModelGroup):
            await self._evict(victim, EVICTED)
        else:
            await victim.unload()  # its end calls release_outside

    async def admit_outside(self, holder: OnDemandProcess, need: memory_budget.Need) -> int:
        """Admit a child's model (the vision model, the embeddings reader) against the same
        budget as the chat models: idle chat models, least recently used first, are
        unloaded to make room; WorkerLoadError(OOM) with the numbers when it cannot fit.
        It counts from here until release_outside (its process ended)."""
        budget = await asyncio.to_thread(memory_budget.current_budget)
        free = await self._admission.admit(holder, need, budget)
        self._outside[id(holder)] = holder
        return free

    def release_outside(self, holder: OnDemandProcess) -> None:
        """The child's process ended: its bytes go back to the budget."""
        if self._outside.pop(id(holder), None) is not None:
            self._leases.changed()  # a load waiting for room may decide again

    async def _evict(self, victim: _ModelGroup, reason: str) -> None:
        """Stop an idle model's workers; it stays known and loads again on its next request."""
        workers, victim.workers = victim.workers, []
        victim.affinity.clear()
        victim.loading = None
        await self._stop_workers(workers, reason)

    # -- leases (core.workers.leases) -------------------------------------------------
    def key_for(self, spec: ModelSpec) -> str | None:
        """The key a model with exactly this spec is known under (loaded or not), so that
        the app and the API share one copy of it."""
        return next((k for k, g in self._groups.items() if g.spec == spec), None)

    def leases(self, key: str) -> int:
        """Requests running on the model or waiting for it."""
        group = self._groups.get(key)
        return group.leases if group is not None else 0

    # -- keep-alive ----------------------------------------------------------------
    def set_keep_alive(self, key: str, seconds: float | None) -> None:
        """How long the model stays loaded once idle, from its last reply's end: None for
        the pool's default, < 0 for ever, 0 to unload as soon as its replies are done."""
        group = self._groups.get(key)
        if group is not None:
            group.keep_alive_s = seconds
            self._idle.ensure()
            self._idle.wake()

    def models(self) -> list[ModelStatus]:
        """Every model with workers up or loading, or failed; least recently used first."""
        out = [g.status(self.idle_unload_s) for g in self._groups.values()
               if g.workers or g.failed or (g.loading is not None and not g.loading.done())]
        return sorted(out, key=lambda m: m.last_used)

    def _ready(self, group: _ModelGroup) -> bool:
        return any(w.state == "ready" for w in group.workers)

    async def _start_workers(self, group: _ModelGroup) -> None:
        taken = {w.replica for w in group.workers if w.state in ("ready", "loading")}
        places = [i for i in range(group.replicas) if i not in taken]
        new = [_Worker(self, group, next(self._ids), i) for i in places]
        # workers being respawned after a crash: a request waits for them like for a load
        respawning = [w.settled for w in group.workers if w.state == "loading" and w.settled]
        group.workers.extend(new)
        results = await asyncio.gather(*(w.start() for w in new), return_exceptions=True)
        if respawning and not self._ready(group):
            await asyncio.wait([asyncio.shield(f) for f in respawning],
                               return_when=asyncio.FIRST_COMPLETED)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors and not self._ready(group):
            err = errors[0]
            group.workers = [w for w in group.workers if w.state == "ready"]
            group.failed = getattr(err, "message", str(err))
            group.failed_code = getattr(err, "code", "LOAD_FAILED")
            raise err

    async def unload(self, key: str, *, wait_s: float = 0.0) -> bool:
        """Stop the model's workers. With `wait_s`, its replies first get up to that long
        to end by themselves; those still running then end with UNLOADED (text so far
        kept). True when nothing had to be cut."""
        group = self._groups.get(key)
        if group is None:
            return True
        clean = await self._leases.until_ended(group, wait_s)
        if self._groups.get(key) is group:
            del self._groups[key]
        await self._stop_workers(group.workers, UNLOADED)
        return clean

    async def release(self, key: str, *, wait_s: float = 0.0) -> bool:
        """Stop the model's workers but keep it known: its next request loads it again
        (an API client's unload, keep_alive 0). Its replies get up to `wait_s` to end;
        those still running then end with UNLOADED. True when nothing had to be cut."""
        group = self._groups.get(key)
        if group is None:
            return True
        clean = await self._leases.until_ended(group, wait_s)
        await self._evict(group, UNLOADED)
        return clean

    def queued(self, key: str) -> int:
        """Requests of a model waiting for a free slot; cheap (no psutil), read per request."""
        group = self._groups.get(key)
        return sum(w.waiting for w in group.workers) if group is not None else 0

    def crash_failure(self, key: str) -> str | None:
        """Why a model was given up on after repeated crashes (None when it wasn't)."""
        group = self._groups.get(key)
        return group.failed if group is not None and group.crash_failed else None

    def worker_for_session(self, key: str, session_id: str) -> str | None:
        """Which worker holds this session's cache (None if none yet)."""
        group = self._groups.get(key)
        worker = group.affinity.get(session_id) if group else None
        return worker.worker_id if worker else None

    def loaded(self) -> list[str]:
        return [k for k, g in self._groups.items() if self._ready(g)]

    # -- requests ----------------------------------------------------------------
    async def generate(self, key: str, request: GenerationRequest) -> AsyncIterator[Event]:
        """Stream the events of one request; always ends with Done."""
        batches = self.generate_batches(key, request)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()  # a consumer that stops early cancels the request

    async def generate_batches(self, key: str, request: GenerationRequest) -> AsyncIterator[list[Event]]:
        """Like generate, but each step hands over every event already queued (never an
        empty list; the last one ends with Done). Closing it early cancels the request.

        Whatever happens to the model meanwhile (unloaded by a switch, stopped by an idle
        timeout or shutdown, its worker crashed), the last batch ends with Done."""
        stream = _Stream(request)
        self._open[request.request_id] = stream  # from here on, cancel() reaches it
        group = self._groups.get(key)
        self._leases.take(group)  # from here on, nothing unloads the model under it
        try:
            async for batch in self._generate(key, stream):
                yield batch
        finally:
            self._open.pop(request.request_id, None)
            self._leases.end(group)

    async def _generate(self, key: str, stream: _Stream) -> AsyncIterator[list[Event]]:
        request = stream.request
        assert request is not None
        group = self._groups.get(key)
        if group is None:
            yield [Error("LOAD_FAILED", f"Model {key!r} is not loaded."), Done("error")]
            return
        if group.crash_failed:
            yield [Error("WORKER_CRASHED", group.failed or "The model is marked failed."), Done("error")]
            return
        refused = group.refusal(request)
        if refused is not None:
            yield [Error("BAD_REQUEST", refused), Done("error")]
            return
        if not self._ready(group):
            try:
                await self.load(key, group.spec, replicas=group.replicas, label=group.label)
            except WorkerLoadError as exc:
                yield [Error(exc.code if exc.code in _CODES else "LOAD_FAILED", exc.message), Done("error")]
                return
        if stream.done:  # cancelled while the model loaded
            yield list(stream.items)
            return
        try:
            worker = group.pick(request.session_id, self.max_sessions)
        except WorkerLoadError as exc:
            yield [Error("LOAD_FAILED", exc.message), Done("error")]
            return
        if not await self._wait_for_slot(worker, stream):
            yield list(stream.items)  # ended while queued: Esc, an unload, shutdown
            return
        async for batch in self._run(worker, stream):
            yield batch

    async def _wait_for_slot(self, worker: _Worker, stream: _Stream) -> bool:
        """Hold one of the worker's slots; False (nothing held) when the stream was ended
        while it waited, so a queued request can be cancelled or failed like a running one."""
        rid = stream.request.request_id if stream.request else ""
        worker.waiting += 1
        worker.queue[rid] = stream
        acquire = asyncio.ensure_future(worker.slots.acquire())
        try:
            while not acquire.done() and not stream.done:
                stream.waiter = asyncio.get_running_loop().create_future()
                await asyncio.wait((acquire, stream.waiter), return_when=asyncio.FIRST_COMPLETED)
                stream.waiter = None
        except BaseException:
            stream.done = True  # the consumer went away: give back a slot got meanwhile
            raise
        finally:
            worker.waiting -= 1
            worker.queue.pop(rid, None)
            if stream.done:
                if acquire.done() and not acquire.cancelled():
                    worker.slots.release()
                else:
                    acquire.cancel()
        return not stream.done

    async def _run(self, worker: _Worker, stream: _Stream) -> AsyncIterator[list[Event]]:
        """Send the request to the worker (a slot held) and pass its events on."""
        request = stream.request
        assert request is not None
        finished = False
        try:
            if worker.state != "ready":
                finished = True
                reason = worker.stop_reason or ("The model worker stopped before this request "
                                                "started; send again.")
                yield [Error("CANCELLED" if worker.stop_reason else "WORKER_CRASHED", reason),
                       Done("error")]
                return
            worker.streams[request.request_id] = stream
            stream.worker = worker
            worker.last_used = time.monotonic()
            worker.send((p.GENERATE, request))
            while True:
                batch = await stream.get_all()
                if isinstance(batch[-1], Done):
                    finished = True
                    yield batch
                    return
                yield batch
        finally:
            worker.slots.release()
            worker.last_used = time.monotonic()
            if not finished and request.request_id in worker.streams:
                worker.streams.pop(request.request_id, None)
                if worker.state == "ready":
                    try:
                        worker.send((p.CANCEL, request.request_id))
                    except OSError:
                        pass

    def cancel(self, request_id: str) -> None:
        """Stop a request; its stream ends with Done('cancelled'). A running one is stopped
        by its worker (which sends the last events); one still queued, or whose worker is
        gone, ends here at once."""
        stream = self._open.get(request_id)
        if stream is None or stream.done:
            return
        worker = stream.worker
        if worker is not None and worker.streams.get(request_id) is stream and worker.state == "ready":
            try:
                worker.send((p.CANCEL, request_id))
                return
            except OSError:
                pass
            worker.streams.pop(request_id, None)
        stream.end(Done("cancelled"))

    # -- crash recovery ------------------------------------------------------------
    def _schedule_respawn(self, worker: _Worker, *, counted: bool = True) -> None:
        """Start the worker again; `counted` crashes spend the restart budget (those pinned
        on one request do not: see _ModelGroup.blame)."""
        group = worker.group
        now = time.monotonic()
        times = worker.restart_times
        while times and now - times[0] > self.restart_window_s:
            times.popleft()
        if counted and len(times) >= self.max_restarts:
            worker.state = "failed"
            group.failed = (
                f"The model crashed {len(times) + 1} times within {self.restart_window_s:.0f} s "
                "and was not restarted again. Check free memory, then reload it."
            )
            worker.error = group.failed
            group.crash_failed = True
            return
        if counted:
            times.append(now)
        task = asyncio.ensure_future(self._respawn(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _respawn(self, worker: _Worker) -> None:
        worker.restarts += 1
        try:
            await worker.start()
        except WorkerLoadError as exc:
            worker.state = "failed"
            worker.error = exc.message
            worker.group.failed = exc.message

    # -- status and shutdown -----------------------------------------------------------
    def status(self) -> list[WorkerStatus]:
        out: list[WorkerStatus] = []
        for group in self._groups.values():
            out.extend(w.status() for w in group.workers)
            if group.failed and not group.workers:
                out.append(WorkerStatus(f"{group.key}#-", group.label, group.spec.engine, "failed",
                                        None, 0, 0, 0, 0.0, 0, group.failed))
        return out

    def pids(self) -> list[int]:
        return [w.process.pid for g in self._groups.values() for w in g.workers
                if w.process is not None and w.process.is_alive()]

    async def _stop_workers(self, workers: list[_Worker], reason: str) -> None:
        """Stop workers on purpose; every request on them ends at once with `reason`."""
        for w in workers:
            w.state = "stopped"
            w.stop_streams(reason)
            try:
                w._detach()
            except (ValueError, OSError):
                pass
            try:
                w.send((p.SHUTDOWN,))
            except (OSError, AttributeError):
                pass
        deadline = time.monotonic() + 3.0
        for w in workers:
            while w.process is not None and w.process.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            w._kill()
            if w.conn is not None:
                w.conn.close()

    async def shutdown(self) -> None:
        """Stop every worker; nothing is left running afterwards."""
        self.closing = True
        self._idle.stop()
        for task in list(self._tasks):
            task.cancel()
        groups, self._groups = list(self._groups.values()), {}
        await self._stop_workers([w for g in groups for w in g.workers], CLOSING)

    def kill_all_now(self) -> None:
        """Synchronous last resort (atexit): kill whatever is still alive."""
        self.closing = True
        for group in self._groups.values():
            for w in group.workers:
                if w.process is not None and w.process.is_alive():
                    w.process.kill()


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker while sys.stderr is the real one.

    Textual swaps sys.stderr for a capture object without a usable fileno while the app
    runs; a tracker first started then fails ("bad value(s) in fds_to_keep").
    """
    from multiprocessing import resource_tracker

    real, sys.stderr = sys.stderr, sys.__stderr__ or sys.stderr
    try:
        resource_tracker.ensure_running()
    finally:
        sys.stderr = real


# Why a request ended when the pool stopped its worker on purpose (Error CANCELLED).
UNLOADED = ("The model was unloaded (another model was loaded, or it was reloaded) before this "
            "reply finished. The reply so far was kept; send again to continue.")
IDLE_UNLOADED = "The model was unloaded after a long idle time; send again to reload it."
EVICTED = "The model was unloaded to make room for another one; send again to reload it."
CLOSING = "llmdeck is closing; the reply so far was kept."
_CODES = {"OOM", "MODEL_CORRUPT", "UNSUPPORTED", "LOAD_FAILED", "TIMEOUT", "INTERNAL"}
_MAX_SUSPECTS = 256
_REFUSE_AFTER = 2  # crashes pinned on one request before it is refused


def _read_outcome(task: asyncio.Task[Any]) -> None:
    """Mark a task's exception as read (its callers see it through their own await)."""
    if not task.cancelled():
        task.exception()


def _whole(value: Any) -> int:
    """A count a worker reported (its engine's info), or 0 when it reported none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _fingerprint(request: GenerationRequest) -> int:
    """Identifies a request's input (not its id): the same conversation sent again."""
    return hash(repr((request.messages, request.tools, request.prompt)))


@atexit.register
def _kill_leftovers() -> None:
    for pool in list(_ALL_POOLS):
        pool.kill_all_now()
