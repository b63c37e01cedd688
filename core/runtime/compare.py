"""Compare: one message to two models at once, both replies streaming side by side, then
one of them kept as the reply while the other stays as a sibling branch of it.

Why not two Turns: a turn is the chat model's reply with tools, documents and memory
around it; a comparison is two plain generations of the same prompt under ONE user
message. Each is saved by its own ReplyRecorder as a child of that message, so the store's
branch model (siblings share a parent, the active leaf picks one) holds both with nothing
new in the schema: keeping one is `switch_branch`, and the chat's branch keys ([ and ])
step to the other afterwards.

The second model loads into the shared pool under its own key (COMPARE_KEY) beside the
chat model; the pool's admission may refuse it, and that sentence comes back as a
CompareRefused value for the UI to show. A top-level core module (not inside
core.runtime) because the UI may import only the faces of core packages.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import presets
from core.engines.base import GenerationRequest, ModelSpec
from core.events import Done, Error, Event, TextDelta, Usage
from core.remote.backend import Backend, PoolBackend
from core.runtime.recorder import ReplyRecorder
from core.tools import chat_messages
from core.wire.compare import LEFT, RIGHT, CompareRefused
from core.workers.pool import WorkerLoadError

if TYPE_CHECKING:
    from core.config import Settings

COMPARE_KEY = "compare"  # the pool's name for the second model of a comparison (_pool_key)
HISTORY = 200  # messages of the conversation sent with the compared message


@dataclass
class CompareSide:
    """One model's half of a comparison: what streamed, its stats, and its stored message."""

    label: str
    backend: Backend
    request: GenerationRequest
    text: str = ""
    usage: Usage | None = None
    error: Error | None = None
    finish_reason: str | None = None
    message_id: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class SideEvent:
    """An event of one side (LEFT: the chat model, RIGHT: the model compared with it)."""

    side: int
    event: Event


async def both_sides(queue: asyncio.Queue[SideEvent | None]) -> AsyncIterator[SideEvent]:
    """The two sides' events as they come, until each side has put its end (None): one
    merge for the comparison in process and as the service's client sees it."""
    ended = 0
    while ended < 2:
        item = await queue.get()
        if item is None:
            ended += 1
            continue
        yield item


async def merged_sides(queue: asyncio.Queue[SideEvent | None], tasks: list[asyncio.Task[None]],
                       on_leave: Callable[[], None]) -> AsyncIterator[SideEvent]:
    """both_sides over the two tasks that fill `queue`; a reader leaving before both
    ended calls `on_leave` (the replies stop). The tasks are awaited on the way out either
    way: one merge and one end for the comparison in process and for the service's client."""
    both_ended = False
    try:
        async for item in both_sides(queue):
            yield item
        both_ended = True
    finally:
        if not both_ended:
            on_leave()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Comparison:
    """Two replies to one user message, streaming at once (see the module's docstring)."""

    runtime: Any  # core.runtime.Runtime (whose compare() calls start_compare: no circle)
    conversation_id: str
    user_message_id: str
    sides: tuple[CompareSide, CompareSide]
    cancelled: bool = False
    kept: int | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def events(self) -> AsyncIterator[SideEvent]:
        """Both streams merged as they come; each side ends with exactly one Done (an
        Error before it when it failed). Leaving early cancels both."""
        queue: asyncio.Queue[SideEvent | None] = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._run(i, queue)) for i in (LEFT, RIGHT)]
        async for item in merged_sides(queue, self._tasks, self.cancel):
            yield item

    async def _run(self, index: int, queue: asyncio.Queue[SideEvent | None]) -> None:
        side = self.sides[index]
        recorder = ReplyRecorder(self.runtime.store_thread, self.conversation_id,
                                 model=side.label, parent_id=self.user_message_id)

        def emit(event: Event) -> None:
            if isinstance(event, TextDelta):
                side.text += event.text
            elif isinstance(event, Usage):
                side.usage = event
            elif isinstance(event, Error):
                side.error = event
            elif isinstance(event, Done):
                side.finish_reason = event.finish_reason
            recorder.record(event)
            queue.put_nowait(SideEvent(index, event))

        try:
            async for event in side.backend.generate(side.request):
                emit(event)
                if isinstance(event, Done):
                    break
        except Exception as exc:  # a backend that breaks still ends this side with a reason
            emit(Error("INTERNAL", f"{side.label} stopped unexpectedly: {exc}"))
        finally:
            if not side.done:
                emit(Done("cancelled" if self.cancelled else "error"))
            store_error = await recorder.finish(cancelled=self.cancelled)
            side.message_id = recorder.message_id
            if store_error is not None:
                queue.put_nowait(SideEvent(index, store_error))
            queue.put_nowait(None)

    def cancel(self) -> None:
        """Stop both replies (Esc); what streamed is kept, stored as stopped."""
        self.cancelled = True
        for side in self.sides:
            if not side.done:
                side.backend.cancel(side.request.request_id)

    @property
    def finished(self) -> bool:
        return all(side.done for side in self.sides) and all(t.done() for t in self._tasks)

    async def keep(self, index: int) -> str:
        """Make side `index`'s reply the conversation's reply; the other stays as its
        sibling branch. Returns the kept message's id."""
        message_id = self.sides[index].message_id
        if message_id is None:
            raise LookupError("That reply was not saved, so it cannot be kept.")
        store = self.runtime.store_handle
        await self.runtime.store_call(store.switch_branch, message_id)
        self.kept = index
        return message_id


async def spec_for(path: str, engine: str | None, context_size: int, *,
                   bundled: bool = False) -> ModelSpec:
    """A picked local model as the pool loads it: the bundled one unpacked first (it may
    not be on disk yet), the engine chosen from the artifact when the listing did not say
    (WorkerLoadError with its sentence when nothing can serve it)."""
    if bundled:
        from core.bundled import provision_bundled_chat

        path = str(await asyncio.to_thread(provision_bundled_chat))
    if engine is None:
        from core.runtime.models import engine_for

        engine = await asyncio.to_thread(engine_for, Path(path))
    return ModelSpec(path=path, engine=engine, context_size=context_size)


def _pool_key(runtime: Any, other: ModelSpec) -> str:
    """Where the second model lives in the pool: the key it is loaded under already (by
    the API, or as an earlier chat model), so no second copy loads; else COMPARE_KEY,
    whose previous model a new comparison replaces, unless the chat itself switched to
    the model known under it (then a second key, so the chat model is never replaced)."""
    known = runtime.pool.key_for(other)
    if known is not None:
        return known
    return COMPARE_KEY if runtime.model_key != COMPARE_KEY else f"{COMPARE_KEY}-2"


def _same_model(runtime: Any, other: ModelSpec) -> bool:
    current = runtime.settings.model
    return bool(current) and other.engine != "scripted" and \
        Path(other.path).expanduser() == Path(str(current)).expanduser()


async def start_compare(runtime: Any, conversation_id: str | None, text: str,
                        other: ModelSpec, label: str) -> Comparison | CompareRefused:
    """Get both models ready, save `text` as the user's message and return the comparison
    (not yet streaming: iterate `events()`); CompareRefused with the reason otherwise.

    The left side is the chat model as it is (a remote endpoint too); the right side is
    `other`, loaded beside it in the pool, with its own preset when it has one (its
    sampling, system prompt and context size), else the same settings. Both get the same
    conversation; no tools are offered (a tool round would make the replies incomparable)."""
    if not text.strip():
        return CompareRefused("Type the message to compare first, then choose the model.")
    if _same_model(runtime, other):
        return CompareRefused("That is the model you are chatting with; choose another one "
                              "to compare it with.")
    if getattr(runtime, "pool", None) is None:  # a client of the engine service
        return CompareRefused("Compare needs the models in this app's own process for now: "
                              "start it with `llmdeck --in-process` to compare two models.")
    if not await runtime.ensure_model():
        return CompareRefused(runtime.model.error or "The chat model could not be loaded.")
    other_settings, other = await _with_preset(runtime.settings, other, label)
    key = _pool_key(runtime, other)
    try:
        await runtime.pool.load(key, other, replicas=1, label=label)
    except WorkerLoadError as exc:  # the budget's refusal names the numbers
        return CompareRefused(exc.message)
    store = runtime.store_handle

    def _save() -> tuple[str, str, list]:
        cid = conversation_id or store.create_conversation(model=runtime.model_ref())
        history = store.messages(cid, limit=HISTORY)
        mid = store.add_message(cid, "user", text)
        return cid, mid, history

    cid, user_id, history = await runtime.store_call(_save)

    def request(settings: Settings) -> GenerationRequest:
        chat: list[dict] = []
        if settings.system_prompt:
            chat.append({"role": "system", "content": settings.system_prompt})
        chat.extend(chat_messages(history))
        chat.append({"role": "user", "content": text})
        return GenerationRequest(request_id=uuid.uuid4().hex, messages=tuple(chat),
                                 sampling=settings.sampling.to_params(), session_id=cid,
                                 thinking=settings.thinking)

    left = CompareSide(runtime.model.label, runtime.backend, request(runtime.settings))
    right = CompareSide(label, PoolBackend(runtime.pool, key), request(other_settings))
    return Comparison(runtime, cid, user_id, (left, right))


async def _with_preset(settings: Settings, other: ModelSpec, label: str
                       ) -> tuple[Settings, ModelSpec]:
    """The settings and spec the second model answers with: its own preset (core.presets)
    over the current settings, as a new chat with it would start; the chat's stay as they
    are."""
    def _find() -> presets.Preset | None:
        found = presets.load()
        key = presets.model_key(None if other.engine == "scripted" else other.path, label)
        return found.get(key)

    preset = await asyncio.to_thread(_find)
    mine = copy.deepcopy(settings)
    if preset is None:
        return mine, other
    presets.apply(mine, preset)
    return mine, replace(other, context_size=mine.context_size)
