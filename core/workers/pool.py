"""WorkerPool: the coordinator of the model worker processes, keyed by model.

Lives in the app process on its asyncio loop. It loads a model (admission against the
memory budget first: core.workers.admission), feeds requests to its workers
(core.workers.worker_process) with a lease each (core.workers.leases), unloads idle
models (core.workers.idle_unload), and respawns a crashed worker within a restart budget.
Sessions stick to the worker that holds their KV cache (core.workers.model_group).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import sys
import time
import weakref
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
from core.workers.model_group import ModelGroup
from core.workers.on_demand import OnDemandProcess
from core.workers.prefix_route import prefix_key
from core.workers.request_stream import RequestStream
from core.workers.status import ModelStatus, WorkerStatus
from core.workers.turn_hold import hold_others, interrupt_api, release
from core.workers.worker_process import CLOSING, WorkerProcess

__all__ = ["CLOSING", "ModelStatus", "WorkerLoadError", "WorkerPool", "WorkerStatus"]

_ALL_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


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
        self._groups: dict[str, ModelGroup] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open: dict[str, RequestStream] = {}  # every request from its start to its end
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
            group = ModelGroup(key, spec, replicas, label or key)
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

    async def _admit_then_start(self, group: ModelGroup, wait_s: float = 0.0) -> None:
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

    async def _admit(self, group: ModelGroup, wait_s: float = 0.0) -> None:
        """Room in the budget for the model (core.workers.admission), or WorkerLoadError."""
        need, budget = await asyncio.to_thread(measure, group.spec, group.replicas)
        free = await self._admission.admit(group, need, budget, wait_s)
        group.admitted = (need, free, budget)

    async def _make_room_from(self, victim: Any) -> None:
        """Unload an idle holder for another load: a chat model's workers stop (it loads
        again on its next request); a child outside the pool stops until its next use."""
        if isinstance(victim, ModelGroup):
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

    async def _evict(self, victim: ModelGroup, reason: str) -> None:
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

    def _ready(self, group: ModelGroup) -> bool:
        return any(w.state == "ready" for w in group.workers)

    async def _start_workers(self, group: ModelGroup) -> None:
        taken = {w.replica for w in group.workers if w.state in ("ready", "loading")}
        places = [i for i in range(group.replicas) if i not in taken]
        new = [WorkerProcess(self, group, next(self._ids), i) for i in places]
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
        stream = RequestStream(request)
        self._open[request.request_id] = stream  # from here on, cancel() reaches it
        group = self._groups.get(key)
        self._leases.take(group)  # from here on, nothing unloads the model under it
        try:
            async for batch in self._generate(key, stream):
                yield batch
        finally:
            self._open.pop(request.request_id, None)
            self._leases.end(group)

    async def _generate(self, key: str, stream: RequestStream) -> AsyncIterator[list[Event]]:
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
        if request.interactive:
            group.person_seen = time.monotonic()
        try:
            worker = group.pick(request.session_id, self.max_sessions,
                                None if request.session_id or request.aside else prefix_key(request),
                                interactive=request.interactive)
        except WorkerLoadError as exc:
            yield [Error("LOAD_FAILED", exc.message), Done("error")]
            return
        if not await self._wait_for_slot(worker, stream):
            yield list(stream.items)  # ended while queued: Esc, an unload, shutdown
            return
        async for batch in self._run(worker, stream):
            yield batch

    async def _wait_for_slot(self, worker: WorkerProcess, stream: RequestStream) -> bool:
        """Hold one of the worker's slots; False (nothing held) when the stream was ended
        while it waited, so a queued request can be cancelled or failed like a running one."""
        rid = stream.request.request_id if stream.request else ""
        worker.waiting += 1
        worker.queue[rid] = stream
        acquire = asyncio.ensure_future(worker.slots.acquire(bool(stream.request and
                                                                 stream.request.interactive)))
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

    async def _run(self, worker: WorkerProcess, stream: RequestStream) -> AsyncIterator[list[Event]]:
        """Send the request to the worker (a slot held) and pass its events on."""
        request = stream.request
        assert request is not None
        finished = False
        held: list[WorkerProcess] = []
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
            if request.interactive:  # the other replicas hold until its first token
                interrupt_api(worker)  # and an API reply's step in flight here stops
                held = hold_others(worker)
            while True:
                batch = await stream.get_all()
                if held and any(isinstance(e, TextDelta | ReasoningDelta | Done) for e in batch):
                    release(held)
                    held = []
                if isinstance(batch[-1], Done):
                    finished = True
                    yield batch
                    return
                yield batch
        finally:
            release(held)
            worker.slots.release()
            worker.last_used = time.monotonic()
            if not finished and request.request_id in worker.streams:
                worker.streams.pop(request.request_id, None)
                if worker.state == "ready":
                    try:
                        worker.send((p.CANCEL, request.request_id))
                    except OSError:
                        pass

    def warm(self, key: str, request: GenerationRequest) -> bool:
        """A conversation was opened: ask the worker its next turn will go to (the
        session's, picked as generate picks it, so the cache warms where the turn lands)
        to load its stored cache in idle time (issue 33). Never loads or waits: False when
        the model is not ready, the worker is not, or the session already has a request
        there (that request's own lookup serves it). True when the hint was sent."""
        group = self._groups.get(key)
        if group is None or group.crash_failed or not self._ready(group):
            return False
        try:
            worker = group.pick(request.session_id, self.max_sessions, request.interactive)
        except WorkerLoadError:
            return False
        session = request.session_id
        if worker.state != "ready" or any(
                s.request is not None and s.request.session_id == session
                for s in [*worker.streams.values(), *worker.queue.values()]):
            return False
        try:
            worker.send((p.WARM, request))
        except (OSError, ValueError):
            return False
        return True

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
    def respawn_later(self, worker: WorkerProcess, *, counted: bool = True) -> None:
        """Start the worker again; `counted` crashes spend the restart budget (those pinned
        on one request do not: see ModelGroup.blame)."""
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

    async def _respawn(self, worker: WorkerProcess) -> None:
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

    def trim_caches(self) -> int:
        """Ask every ready worker to drop its prompt caches (memory is short); how many."""
        asked = 0
        for group in self._groups.values():
            for worker in group.workers:
                if worker.state == "ready":
                    try:
                        worker.send((p.TRIM,))
                        asked += 1
                    except (OSError, ValueError):  # its pipe closed: it is going anyway
                        pass
        return asked

    def idle_models(self) -> list[tuple[str, str]]:
        """(key, label) of the models loaded and doing nothing, least recently used first:
        what the memory watch (core.workers.memory_watch) may unload under pressure."""
        idle = sorted((g for g in self._groups.values() if g.idle()), key=lambda g: g.last_used)
        return [(g.key, g.label) for g in idle]

    def pids(self) -> list[int]:
        return [w.process.pid for g in self._groups.values() for w in g.workers
                if w.process is not None and w.process.is_alive()]

    async def _stop_workers(self, workers: list[WorkerProcess], reason: str) -> None:
        """Stop workers on purpose; every request on them ends at once with `reason`."""
        for w in workers:
            w.state = "stopped"
            w.stop_streams(reason)
            try:
                w.detach()
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
            w.kill()
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
_CODES = {"OOM", "MODEL_CORRUPT", "UNSUPPORTED", "LOAD_FAILED", "TIMEOUT", "INTERNAL"}


def _read_outcome(task: asyncio.Task[Any]) -> None:
    """Mark a task's exception as read (its callers see it through their own await)."""
    if not task.cancelled():
        task.exception()


@atexit.register
def _kill_leftovers() -> None:
    for pool in list(_ALL_POOLS):
        pool.kill_all_now()
