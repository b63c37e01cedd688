"""Runtime: the one object the UI holds.

An async API over the worker pool, the store and the settings. The UI calls it from
Textual's loop; everything slow happens elsewhere: model work in worker processes, SQLite
on one dedicated store thread. Streaming replies are written to the store as partial
messages at most every FLUSH_S, so a crash loses at most that much text.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core import bundled, model_refs, paths
from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec
from core.events import Done, Error, Event, ReasoningDelta, TextDelta, ToolCall, Usage
from core.remote.backend import Backend, PoolBackend
from core.remote.refs import remote_ref
from core.store import (
    Conversation,
    Message,
    MessageStream,
    SearchHit,
    Store,
    StoreError,
    check_store,
    open_store,
)
from core.store.errors import CANNOT_OPEN
from core.tools import Approver, ToolKit, ToolRunner, ToolStatus, chat_messages
from core.tools.loop import (
    MAX_ROUNDS,
    assistant_message,
    limit_statuses,
    tool_message,
    tool_results_text,
)
from core.workers.pool import WorkerLoadError, WorkerPool, WorkerStatus

if TYPE_CHECKING:
    from core.chat_context import AttachResult, ChatContext
    from core.docs import Attachment, DocError, MentionResolution
    from core.vision import AttachedImage

T = TypeVar("T")
FLUSH_S = 0.25
SIDEBAR_PAGE = 200  # conversations the sidebar lists (newest first)
# GIL hand-over interval while the store thread reads the first page (see open_store_soon).
STARTUP_SWITCH_INTERVAL_S = 5e-5


@dataclass
class ModelState:
    """What the UI shows about the active model."""

    label: str = "no model"
    state: str = "idle"  # idle | provisioning | loading | ready | failed
    error: str | None = None
    context_size: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def engine_for(path: Path) -> str:
    """Pick the engine from the artifact alone (rules in core.engines.select); does disk I/O.

    Raises WorkerLoadError with a sentence the user can act on when nothing can serve it.
    """
    from core.engines.select import SelectionError, select_engine

    if not path.exists():
        raise WorkerLoadError(
            "LOAD_FAILED",
            f"Model file not found: {path}. Pick another model, or restore the bundled one "
            "with `llmdeck models restore-default`.",
        )
    try:
        return select_engine(path).engine
    except SelectionError as exc:
        raise WorkerLoadError(exc.code, exc.message) from None


class Turn:
    """One user message and the assistant reply streaming for it."""

    def __init__(self, runtime: Runtime, conversation_id: str, user_message_id: str,
                 request: GenerationRequest) -> None:
        self.runtime = runtime
        self.conversation_id = conversation_id
        self.user_message_id = user_message_id
        self.request = request
        self.assistant_message_id: str | None = None
        self.cancelled = False
        self.approve: Approver | None = None  # asked before a tool runs; None = deny all
        self.max_rounds = MAX_ROUNDS
        self._tool_runner: ToolRunner | None = None
        self.rollover: Any = None  # a memory RolloverMarker when this turn started a new session
        self.sources: tuple[str, ...] = ()  # documents cited in this turn's context
        # Set when the reply could not be (fully) saved; events() reports it before Done.
        self.store_error: Error | None = None

    def cancel(self) -> None:
        self.cancelled = True
        self.runtime.backend.cancel(self.request.request_id)
        if self._tool_runner is not None:
            self._tool_runner.cancel()

    async def events(self) -> AsyncIterator[Event | ToolStatus]:
        """Stream the reply's events; the reply is saved as it streams.

        When a generation ends with tool calls, each call is shown (ToolStatus), approved,
        run and stored as a `tool` message, and the model goes on with the results: one
        Done at the very end, at most `max_rounds` generations.
        """
        rt = self.runtime
        parent_id = self.user_message_id
        for round_no in range(1, self.max_rounds + 1):
            calls: list[ToolCall] = []
            text: list[str] = []
            done: Done | None = None
            async for event in self._generate(parent_id):
                if isinstance(event, ToolCall):
                    calls.append(event)
                elif isinstance(event, TextDelta):
                    text.append(event.text)
                if isinstance(event, Done):
                    done = event
                else:
                    yield event
            if self.store_error is not None:
                yield self.store_error
                if done is not None:
                    yield done
                return
            assistant_id = self.assistant_message_id
            if not calls or self.cancelled or assistant_id is None or done is None \
                    or done.finish_reason in ("error", "cancelled"):
                if done is not None:
                    yield done
                return
            statuses: list[ToolStatus] = []
            shown: dict[str, list[AttachedImage]] = {}  # call id -> images it attached
            if round_no == self.max_rounds:
                statuses = limit_statuses(calls, self.max_rounds)
                for status in statuses:
                    yield status
            else:
                ctx = rt.tools.context(self.conversation_id, store=rt.store_handle,
                                       store_call=rt.store_call)
                self._tool_runner = ToolRunner(rt.tools.registry, rt.tools.policy, ctx, self.approve)
                try:
                    async for status in self._tool_runner.run(calls):
                        if status.final:
                            statuses.append(status)
                            if status.figures:  # an MCP image result: attached before it shows
                                shown[status.call.id] = await rt.chat.attach_tool_images(
                                    self.conversation_id, status.figures)
                        yield status
                finally:
                    self._tool_runner = None
            try:
                parent_id = await rt.store_call(
                    rt.store_handle.add_message, self.conversation_id, "tool",
                    tool_results_text(statuses), parent_id=assistant_id,
                    tool_results=[s.record() for s in statuses])
            except StoreError as exc:
                yield Error("STORE_FAILED", f"{exc.message} The tool results were not saved.")
                yield Done("error")
                return
            if self.cancelled or round_no == self.max_rounds:
                yield Done("cancelled" if self.cancelled else "tool_calls")
                return
            follow = (assistant_message("".join(text), calls),
                      *[await self._tool_message(s, shown.get(s.call.id, [])) for s in statuses])
            self.request = replace(self.request, request_id=uuid.uuid4().hex,
                                   messages=self.request.messages + follow)

    async def _tool_message(self, status: ToolStatus,
                            images: list[AttachedImage]) -> dict[str, Any]:
        """A tool result for the follow-up generation; images it attached go in as they do
        for /attach: image parts for a model that sees, captions or a notice otherwise."""
        message = tool_message(status.call.id, status.call.name, status.result)
        if not images:
            return message
        block = await self.runtime.chat.tool_images_text(images)
        if block is not None:
            return {**message, "content": f"{status.result}\n\n{block}"}
        parts: list[dict[str, Any]] = [{"type": "image", "path": a.image.path} for a in images]
        return {**message, "content": [*parts, {"type": "text", "text": status.result}]}

    async def _generate(self, parent_id: str) -> AsyncIterator[Event]:
        """One generation of the reply, saved as one assistant message under `parent_id`."""
        rt = self.runtime
        stream = MessageStream(rt.store_handle, self.conversation_id,
                               model=rt.model.label, parent_id=parent_id, interval=0.0)
        text: list[str] = []
        reasoning: list[str] = []
        tool_calls: list[dict[str, Any]] = []
        last_flush = time.monotonic()
        usage: dict[str, Any] | None = None
        error: Error | None = None
        finish = "error"
        try:
            ok = await rt.ensure_model()
            if not ok or self.cancelled:
                error = Error(
                    "LOAD_FAILED" if not self.cancelled else "CANCELLED",
                    rt.model.error or "The model is not available.",
                ) if not self.cancelled else None
                if error:
                    yield error
                finish = "error" if error else "cancelled"
                yield Done(finish)  # type: ignore[arg-type]
                return
            if not self.request.tools:
                await rt.tools.prepare(rt.model.info)  # MCP servers start on first use
                self.request = replace(self.request, tools=rt.tools.offer(rt.model.info))
            async for event in rt.backend.generate(self.request):
                if isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, ReasoningDelta):
                    reasoning.append(event.text)
                elif isinstance(event, ToolCall):
                    tool_calls.append({"id": event.id, "name": event.name,
                                       "arguments": event.arguments, "error": event.error})
                elif isinstance(event, Usage):
                    rt.chat.observe(self, event)
                    usage = {"prompt_tokens": event.prompt_tokens, "cached_tokens": event.cached_tokens,
                             "completion_tokens": event.completion_tokens, "ttft_ms": event.ttft_ms,
                             "decode_tps": event.decode_tps}
                elif isinstance(event, Error):
                    error = event
                elif isinstance(event, Done):
                    finish = event.finish_reason
                now = time.monotonic()
                if (text or reasoning) and now - last_flush >= FLUSH_S:
                    last_flush = now
                    t, r = "".join(text), "".join(reasoning)
                    text.clear()
                    reasoning.clear()
                    rt.store_call_nowait(stream.feed, t, r)
                yield event
        finally:
            t, r = "".join(text), "".join(reasoning)
            status = "error" if error is not None else "complete"
            # Esc is no failure; the pool ending a reply (its model unloaded) is, and says why.
            if error is not None and error.code == "CANCELLED" and finish != "error":
                error = None
            if error is not None and error.code == "WORKER_CRASHED":
                status = "partial"
            elif error is None and (self.cancelled or finish == "cancelled"):
                status = "stopped"  # Esc: the text is all the user wanted, not a failure
            failed = error

            def _finish() -> None:
                if t or r:
                    stream.feed(t, r)
                stream.finish(status, usage=usage, tool_calls=tool_calls or None,
                              error=failed.message if failed else None)

            try:
                await rt.store_call(_finish)
            except StoreError as exc:  # disk full, file gone: the reply stays on screen
                self.store_error = _unsaved_reply(exc, stream)
            self.assistant_message_id = stream.message_id


def _unsaved_reply(exc: StoreError, stream: MessageStream) -> Error:
    """What to tell the user when a streamed reply could not be saved: why, and how much
    of it is on disk (the app keeps running; the text stays on screen)."""
    kept = len(stream.flushed_text) if stream.message_id is not None else 0
    saved = (f"The first {kept:,} characters of this reply are saved" if kept
             else "This reply was not saved")
    return Error("STORE_FAILED", f"{exc.message} {saved}; the rest is only on screen.")


class Runtime:
    """Async facade over pool, store and settings; the UI's only door into the core."""

    def __init__(self, settings: Settings | None = None, *, pool: WorkerPool | None = None,
                 model_spec: ModelSpec | None = None) -> None:
        self.settings = settings or Settings.load()
        idle = self.settings.idle_unload_minutes
        self.pool = pool or WorkerPool(idle_unload_s=idle * 60 if idle and idle > 0 else None)
        self.model = ModelState()
        self.model_key = "chat"
        # Where generations come from: the pool (local model) or a remote endpoint.
        self.backend: Backend = PoolBackend(self.pool, self.model_key)
        self._spec_override = model_spec
        self._store: Store | None = None
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmdeck-store")
        self._opening: Future[Store] | None = None
        self._checked: Future[Store] | None = None  # the store after its integrity check
        self._first_page: Future[list[Conversation] | None] | None = None
        self._store_failure: StoreError | None = None
        # Said once the store is open when a damaged database was replaced (for the UI).
        self.store_notice: str | None = None
        # True from the moment a damaged database is found until start() returns: copying
        # what can be read takes seconds on a long history, and the UI says so meanwhile.
        self.store_recovering = False
        self._load_task: asyncio.Task[bool] | None = None
        self._status_task: asyncio.Task[None] | None = None
        self._closed = False
        self.listeners: list[Callable[[ModelState], None]] = []
        self.tools = ToolKit.from_settings(self.settings)
        self._chat: ChatContext | None = None
        # Called with (conversation_id, stage), stage "summarising" or "done": the chat
        # context's listeners, kept here so the UI can listen before it exists.
        self.memory_listeners: list[Callable[[str, str], None]] = []

    @property
    def chat(self) -> ChatContext:
        """Documents and long-conversation memory, made on first use: the documents and
        memory layers are ~10 ms of imports the first frame does not need (the app imports
        them in a thread once it is up, tui.warmup)."""
        if self._chat is None:
            from core.chat_context import ChatContext

            self._chat = ChatContext(self)
            self._chat.listeners = self.memory_listeners
        return self._chat

    # -- lifecycle -------------------------------------------------------------
    def open_store_soon(self) -> None:
        """Open the store and read the sidebar's first page on the store thread now.

        The app calls this as it is built, so both are done while Textual starts up and its
        first frame can list the history (take_first_page): waiting for start() instead
        costs frames, since the loop is busy composing when the store thread answers.

        SQLite releases the GIL for every row it steps, and the UI thread, busy starting up,
        keeps it for the whole switch interval (5 ms) each time: 200 rows took 60-120 ms
        instead of 1. Until the page is read, the interval is 50 us (it costs nothing
        when no other thread waits for the GIL).
        """
        if self._opening is None:
            self._submit_open()
            self._first_page = self._db.submit(self._read_first_page, self._opening)
            self._checked = self._db.submit(self._check, self._opening)
            previous = sys.getswitchinterval()
            if previous > STARTUP_SWITCH_INTERVAL_S:
                sys.setswitchinterval(STARTUP_SWITCH_INTERVAL_S)
                self._first_page.add_done_callback(lambda _: sys.setswitchinterval(previous))

    def _submit_open(self) -> None:
        # paths.db_path() creates folders: on the store thread too, where a read-only home
        # becomes a StoreError that start() reports, not a traceback while the app is built.
        self._opening = self._db.submit(lambda: open_store(paths.db_path()))

    def _check(self, opening: Future[Store]) -> Store:
        """On the store thread after the first page: a damaged file is replaced here (see
        core.store.recovery), so the first frame never waits for the check."""
        return check_store(opening.result(), on_damage=self._recovering)

    def _recovering(self) -> None:
        self.store_recovering = True  # read by the UI while start() still waits

    @staticmethod
    def _read_first_page(opening: Future[Store]) -> list[Conversation] | None:
        try:  # runs on the store thread after the open (one thread, in order): done
            return opening.result().list_conversations(SIDEBAR_PAGE)
        except StoreError:
            return None  # start() reports the open's error; a listing error, the UI's list

    def take_first_page(self) -> list[Conversation] | None:
        """The first page that open_store_soon read, if it is there now (never waits);
        given out once, None otherwise."""
        page, self._first_page = self._first_page, None
        if page is None or not page.done():
            return None
        return page.result()

    async def start(self, *, preload: bool = True) -> None:
        if self._checked is None:
            self._submit_open()
            self._checked = self._db.submit(self._check, self._opening)
        try:
            self._store = await asyncio.wrap_future(self._checked)
        except StoreError as exc:
            self._store_failure = exc
            raise
        finally:
            self.store_recovering = False
        if self._store.recovery is not None:
            self.store_notice = self._store.recovery.message
        if preload:
            self._load_task = asyncio.ensure_future(self._load_model())
        self._status_task = asyncio.ensure_future(self._publish_status())

    async def _publish_status(self) -> None:
        """Keep the status file fresh for `llmdeck workers` in another terminal."""
        from core.workers.status_file import write_status

        while True:
            try:
                await asyncio.to_thread(lambda: write_status(self.worker_status()))
            except OSError:
                pass
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        """Stop workers and close the store; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._load_task and not self._load_task.done():
            self._load_task.cancel()
        if self._status_task is not None:
            self._status_task.cancel()
            from core.workers.status_file import status_path

            status_path().unlink(missing_ok=True)
        if self._chat is not None:
            await self._chat.close()
        await self.pool.shutdown()
        await self.backend.close()
        await self.tools.close()
        if self._store is None and self._checked is not None:  # opened early, never started
            try:
                self._store = await asyncio.wrap_future(self._checked)
            except StoreError:
                pass
        if self._store is not None:
            await self.store_call(self._store.close)
        self._db.shutdown(wait=True)

    @property
    def store_handle(self) -> Store:
        """The open store; StoreError (the open's own, with its sentence) when it could not
        be opened, so every caller gets the reason rather than an assertion."""
        if self._store is None:
            raise self._store_failure or StoreError(
                CANNOT_OPEN, "The conversation history is not open yet; try again in a moment.")
        return self._store

    async def store_call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, lambda: fn(*args, **kwargs))

    def store_call_nowait(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a write on the store thread without waiting (ordered with other calls)."""
        self._db.submit(fn, *args)

    # -- model -----------------------------------------------------------------
    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener(self.model)

    async def _resolve_spec(self) -> ModelSpec:
        if self._spec_override is not None:
            return self._spec_override
        s = self.settings
        if s.model:
            path = Path(s.model).expanduser()
            label = path.name
        else:
            self.model.label = bundled.BUNDLED_CHAT_LABEL
            target = bundled.bundled_chat_target()
            if not await asyncio.to_thread(paths.config_path().exists):  # first run
                self.model.state = "provisioning"
                self._notify()
                # The bundled Gemma: its MLX import where MLX has a GPU, else the GGUF.
                from core.engines.select import default_model

                chosen = await asyncio.to_thread(default_model)
                target = Path(chosen.path)
                s.model, s.engine = chosen.path, chosen.engine
                await asyncio.to_thread(s.save)
            path, label = target, bundled.BUNDLED_CHAT_LABEL
        self.model.label = label if label != bundled.BUNDLED_CHAT_NAME else bundled.BUNDLED_CHAT_LABEL
        engine = s.engine or await asyncio.to_thread(engine_for, path)
        return ModelSpec(path=str(path), engine=engine, context_size=s.context_size,
                         options=(("speculative", bool(s.speculative)),
                                  ("draft_model", s.draft_model if engine == "mlx" else None)))

    async def _use_remote(self, endpoint_name: str, model: str) -> bool:
        """Point generations at a remote endpoint; nothing loads locally."""
        endpoint = self.settings.remote(endpoint_name)
        self.model.label = f"{model} @ {endpoint_name}"
        if endpoint is None:
            self.model.state = "failed"
            self.model.error = (f"No remote endpoint named {endpoint_name!r} is configured; "
                                "add it under [[remotes]] in settings.")
            self._notify()
            return False
        from core.remote.client import RemoteBackend

        self.backend = RemoteBackend(endpoint, model)
        self.model.state = "ready"
        self.model.error = None
        self.model.info = {"engine": "remote", "url": endpoint.url, "model": model}
        self._notify()
        return True

    async def _load_model(self) -> bool:
        await self.backend.close()
        ref = remote_ref(self.settings.model) if self._spec_override is None else None
        if ref is not None:
            return await self._use_remote(*ref)
        self.backend = PoolBackend(self.pool, self.model_key)
        try:
            spec = await self._resolve_spec()
            if spec.engine == "scripted" and self._spec_override is not None:
                self.model.label = spec.option("label", "scripted")
            self.model.state = "loading"
            self.model.error = None
            self._notify()
            # llama.cpp runs one sequence per worker: two workers let two chats stream at
            # once; MLX batches every session in one worker.
            replicas = self.settings.replicas or (2 if spec.engine == "llamacpp" else 1)
            info = await self.pool.load(self.model_key, spec, replicas=replicas,
                                        label=self.model.label)
        except WorkerLoadError as exc:
            self.model.state = "failed"
            self.model.error = exc.message
            self._notify()
            return False
        except Exception as exc:  # provisioning (disk full, missing package)
            self.model.state = "failed"
            self.model.error = f"Could not prepare the model: {exc}"
            self._notify()
            return False
        self.model.state = "ready"
        self.model.info = info
        self.model.context_size = int(info.get("context_size") or 0)
        self._notify()
        return True

    async def ensure_model(self) -> bool:
        """Load the configured model if it is not loaded; False (with model.error) if it can't."""
        crashed = self.pool.crash_failure(self.model_key)
        if crashed:
            self.model.state = "failed"
            self.model.error = crashed
            self._notify()
            return False
        if self.model.state == "ready" and self.backend.ready():
            return True
        if self._load_task is None or self._load_task.done():
            if self._load_task is not None and self._load_task.done() and self.model.state == "ready":
                pass
            self._load_task = asyncio.ensure_future(self._load_model())
        return await asyncio.shield(self._load_task)

    async def reload_model(self) -> bool:
        """Unload and load the current model again (clears a crash-budget failure)."""
        await self.pool.unload(self.model_key)
        self.model.state = "idle"
        self._load_task = asyncio.ensure_future(self._load_model())
        return await asyncio.shield(self._load_task)

    async def switch_model(self, path: str, engine: str | None = None) -> bool:
        await self.pool.unload(self.model_key)
        self.settings.model = path
        self.settings.engine = engine
        self._spec_override = None
        self.model = ModelState()
        self._load_task = asyncio.ensure_future(self._load_model())
        return await asyncio.shield(self._load_task)

    def model_ref(self) -> str | None:
        """What a conversation remembers of the active model (core.model_refs)."""
        if self._spec_override is not None:
            return self.model.label
        ref = model_refs.make(self.settings.model, self.settings.engine)
        return ref or (self.model.label if self.model.state != "idle" else None)

    def is_active_model(self, ref: str) -> bool:
        """Whether `ref` names the model in use now (then opening needs no switch)."""
        if ref in (self.model_ref(), self.model.label):
            return True
        parsed = model_refs.parse(ref)
        current = self.settings.model
        return (self._spec_override is None and not parsed.is_label and current is not None
                and Path(parsed.model).expanduser() == Path(current).expanduser()
                and parsed.engine in (None, self.settings.engine))

    async def find_model(self, ref: str) -> tuple[str, str | None] | None:
        """(model, engine) to load for a conversation's remembered model, or None when it is
        no longer here: its file is gone, or its remote endpoint is no longer configured.
        Reads the disk, so it runs in a thread."""
        parsed = model_refs.parse(ref)
        if parsed.remote is not None:
            return (parsed.model, None) if self.settings.remote(parsed.remote[0]) else None
        if not parsed.is_label:
            exists = await asyncio.to_thread(Path(parsed.model).expanduser().exists)
            return (parsed.model, parsed.engine) if exists else None

        def _by_label() -> tuple[str, str | None] | None:  # conversations saved before refs
            from core.hub.registry import list_local_models

            label = parsed.model
            for m in list_local_models():
                names = {m.name, m.path.name}
                if m.source == "bundled":
                    names.add(bundled.BUNDLED_CHAT_LABEL)
                if m.valid and label in names:
                    return str(m.path), m.engine
            return None

        return await asyncio.to_thread(_by_label)

    def worker_status(self) -> list[WorkerStatus]:
        utility = self._chat.utility.status() if self._chat is not None else None
        if self._chat is not None:
            vision = self._chat.captioner.status()
        elif getattr(self.settings, "vision_model", None):  # listed before its first use
            from core.vision.captions import Captioner

            vision = Captioner(lambda: self.settings).status()
        else:
            vision = None
        return (self.pool.status() + ([utility] if utility is not None else [])
                + ([vision] if vision is not None else []) + self.tools.mcp.status())

    # -- conversations -----------------------------------------------------------
    async def list_conversations(self, limit: int = SIDEBAR_PAGE) -> list[Conversation]:
        return await self.store_call(self.store_handle.list_conversations, limit)

    async def messages(self, conversation_id: str, limit: int = 50,
                       before: str | None = None) -> list[Message]:
        """The active branch's last `limit` messages, or the page just before `before`."""
        return await self.store_call(self.store_handle.messages, conversation_id, limit, before)

    async def conversation(self, conversation_id: str) -> Conversation | None:
        return await self.store_call(self.store_handle.get_conversation, conversation_id)

    async def messages_around(self, conversation_id: str, message_id: str,
                              limit: int = 50) -> tuple[list[Message], bool, bool]:
        """The page of the active branch around `message_id` (a search hit, possibly on an
        older branch, which becomes active) and whether older / newer messages exist beyond
        it. About half the page comes before the hit, so it opens with context both ways."""
        store = self.store_handle
        half = max(1, limit // 2)

        def _around() -> tuple[list[Message], bool, bool]:
            hit = store.get_message(message_id)
            if hit is None or hit.conversation_id != conversation_id:
                return [], False, False  # deleted since the search ran
            store.switch_branch(message_id)
            through = store.messages_through(conversation_id, message_id, half + 1)
            older = len(through) > half  # one more than kept: there is more above
            through = through[-half:]
            room = limit - len(through)
            after = store.messages_after(conversation_id, message_id, room + 1)
            return through + after[:room], older, len(after) > room

        return await self.store_call(_around)

    async def messages_after(self, conversation_id: str, after: str,
                             limit: int = 50) -> list[Message]:
        """The active branch's next `limit` messages after `after` (scrolling down from an
        older page opened at a search hit)."""
        return await self.store_call(self.store_handle.messages_after, conversation_id, after, limit)

    async def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        return await self.store_call(self.store_handle.search, query, limit)

    async def start_turn(self, conversation_id: str | None, text: str) -> Turn:
        """Save the user's message and prepare the reply (history comes from the store)."""
        store = self.store_handle

        def _open() -> tuple[str, list[Message]]:
            cid = conversation_id or store.create_conversation(model=self.model_ref())
            return cid, store.messages(cid, limit=400)

        cid, history = await self.store_call(_open)
        try:  # attached documents, and a memory rollover when the context is 70% full
            prepared = await self.chat.prepare_turn(cid, history, text)
        except Exception:  # never lose the user's message to a documents/memory failure
            mid = await self.store_call(store.add_message, cid, "user", text)
            return Turn(self, cid, mid, self._request(cid, history[-200:], text))
        mid = await self.store_call(self.chat.save_turn_start, store, cid, text, prepared)
        request = replace(self._request(cid, [], text), messages=prepared.messages,
                          session_id=prepared.session_id)
        turn = Turn(self, cid, mid, request)
        turn.rollover, turn.sources = prepared.marker, prepared.sources
        return turn

    # -- documents ----------------------------------------------------------------------
    async def attach(self, conversation_id: str | None, paths: list[str | Path],
                     progress: Callable[[str, str, int, int], None] | None = None,
                     ) -> list[AttachResult | DocError]:
        """Attach files (several at once) to a conversation; a new one when None, created
        only if some file attached. Bad files come back as DocError; nothing else changes.
        `progress(file_name, stage, done, total)`; cancelling the call stops the work."""
        return await self.chat.attach(conversation_id, paths, progress)

    def check_mentions(self, conversation_id: str | None, text: str) -> MentionResolution:
        """For the composer: which @doc(...) mentions resolve, which to flag before sending."""
        return self.chat.check_mentions(conversation_id, text)

    async def attachments(self, conversation_id: str | None) -> list[Attachment]:
        """The attachments of a conversation (loads them from the store the first time)."""
        return await self.chat.attachments(conversation_id)

    async def detach(self, conversation_id: str, alias: str) -> bool:
        return await self.chat.detach(conversation_id, alias)

    async def images(self, conversation_id: str | None) -> list[AttachedImage]:
        """The conversation's attached images, oldest first (cards in the chat view)."""
        return await self.chat.images(conversation_id)

    def _request(self, cid: str, history: list[Message], text: str) -> GenerationRequest:
        """The generation request for `text` after `history` (system prompt first)."""
        chat: list[dict[str, Any]] = []
        if self.settings.system_prompt:
            chat.append({"role": "system", "content": self.settings.system_prompt})
        chat.extend(chat_messages(history))  # tool calls and results included
        chat.append({"role": "user", "content": text})
        return GenerationRequest(
            request_id=uuid.uuid4().hex,
            messages=tuple(chat),
            sampling=self.settings.sampling.to_params(),
            session_id=cid,
        )

    # -- message actions (regenerate, edit, branches, delete) ------------------------------
    async def _turn_for_user_message(self, cid: str, user_id: str) -> Turn:
        store = self.store_handle

        def _history() -> tuple[Message, list[Message]]:
            page = store.messages_through(cid, user_id, limit=201)
            return page[-1], page[:-1]

        user, history = await self.store_call(_history)
        request = self._request(cid, history, user.content)
        try:  # documents and memory as for a new turn; a rollover here is not stored
            prepared = await self.chat.prepare_turn(cid, history, user.content)
        except Exception:
            return Turn(self, cid, user.id, request)
        turn = Turn(self, cid, user.id, replace(request, messages=prepared.messages,
                                                session_id=prepared.session_id))
        turn.sources = prepared.sources
        return turn

    async def regenerate(self, conversation_id: str, message_id: str) -> Turn:
        """A new reply to the user message that `message_id` answers (or is): the old reply
        stays as another branch."""
        msg = await self.store_call(self.store_handle.get_message, message_id)
        if msg is None:
            raise LookupError("That message no longer exists.")
        user_id = msg.id if msg.role == "user" else msg.parent_id
        if user_id is None:
            raise LookupError("There is no user message to answer.")
        await self.store_call(self.store_handle.switch_branch, user_id)
        return await self._turn_for_user_message(conversation_id, user_id)

    async def edit_and_resend(self, conversation_id: str, message_id: str, text: str) -> Turn:
        """Save `text` as a sibling of user message `message_id` (a new branch) and answer it."""
        new_id = await self.store_call(self.store_handle.edit_message, message_id, text)
        return await self._turn_for_user_message(conversation_id, new_id)

    async def branch_positions(self, message_ids: list[str]) -> dict[str, tuple[int, int]]:
        """(1-based index, count) among its siblings for each message that has siblings."""
        store = self.store_handle

        def _positions() -> dict[str, tuple[int, int]]:
            out: dict[str, tuple[int, int]] = {}
            for mid in message_ids:
                ids = [m.id for m in store.branches(mid)]
                if len(ids) > 1 and mid in ids:
                    out[mid] = (ids.index(mid) + 1, len(ids))
            return out

        return await self.store_call(_positions)

    async def step_branch(self, message_id: str, step: int) -> bool:
        """Make the previous (-1) or next (+1) sibling of `message_id` active; False at an end."""
        store = self.store_handle

        def _step() -> bool:
            ids = [m.id for m in store.branches(message_id)]
            if message_id not in ids:
                return False
            index = ids.index(message_id) + step
            if not 0 <= index < len(ids):
                return False
            store.switch_branch(ids[index])
            return True

        return await self.store_call(_step)

    async def delete_message(self, message_id: str) -> int:
        """Delete a message and every reply below it (Store.delete_message); returns how
        many messages went."""
        return await self.store_call(self.store_handle.delete_message, message_id)

    # -- conversations: rename, delete, export -----------------------------------------------
    async def rename_conversation(self, conversation_id: str, title: str) -> None:
        await self.store_call(self.store_handle.rename_conversation, conversation_id, title)

    async def delete_conversation(self, conversation_id: str) -> None:
        await self.store_call(self.store_handle.delete_conversation, conversation_id)
        await self.tools.sandbox.end(conversation_id)  # its variables and scratch go with it

    async def export_conversation(self, conversation_id: str, folder: Path | None = None) -> Path:
        """Write the active branch as Markdown under data_dir()/exports; returns the file."""
        store = self.store_handle

        def _export() -> Path:
            text = store.export_markdown(conversation_id)
            conv = store.get_conversation(conversation_id)
            stem = "".join(ch if ch.isalnum() or ch in "-_" else "-"
                           for ch in (conv.title if conv and conv.title else "conversation"))[:40]
            out_dir = folder or (paths.data_dir() / "exports")
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / f"{stem.strip('-') or 'conversation'}-{conversation_id[:8]}.md"
            path.write_text(text, encoding="utf-8")
            return path

        return await self.store_call(_export)

    # -- settings ------------------------------------------------------------------------------
    async def save_settings(self) -> Path | None:
        """Write settings to the TOML config file off the loop; returns where the old file
        was kept aside, when it held entries llmdeck could not read (Settings.save)."""
        return await asyncio.to_thread(self.settings.save)


def context_use(messages: list[Message]) -> int:
    """Tokens the conversation fills: prompt + completion of the newest reply with usage."""
    for m in reversed(messages):
        if m.usage:
            return int(m.usage.get("prompt_tokens", 0)) + int(m.usage.get("completion_tokens", 0))
    return 0
