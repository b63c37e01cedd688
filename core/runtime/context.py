"""ChatContext: context preparation, what goes into a request besides the user's words.

Two things feed a turn: attached documents (whole when small, the top-k chunks with
"[file.pdf p.3]" citations when large) and the conversation's memory (the context wind
monitor; from 60% full a summary is written by the loaded model in the background, and
the turn at 70% swaps it in as the seed of a fresh session, so no turn waits for it; room
is kept for the reply, and a context overflow is retried once with a rolled context:
core.runtime.room does that part).
Both need work that must not run on the UI loop: extraction and embedding go to the
utility worker process (core.docs.worker), summaries to the model worker through the
pool, SQLite to the store thread. This module only orchestrates; the logic lives in
core.docs and core.memory.

The memory is rebuilt from the store's active branch on every turn (markers are stored
messages), so branches, edits and restarts need no extra bookkeeping; only the
monitor's calibration (real prompt tokens / estimate) is kept in memory.

It is handed the settings, the model lifecycle and the store thread; it never calls back
into the Runtime that owns it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core.docs.attachments import Attachment, AttachmentRegistry, MentionResolution
from core.docs.chunking import count_tokens
from core.docs.errors import DocError
from core.docs.extract import DEFAULT_MAX_BYTES, check_path
from core.docs.persist import load_results, save_result
from core.docs.retrieval import CONTEXT_HEADER, IngestResult, format_excerpt
from core.docs.service import DocsService
from core.docs.worker import UtilityWorker, UtilityWorkerError
from core.engines.base import GenerationRequest
from core.engines.select import sees_images
from core.events import Usage
from core.memory.persist import resume_from_messages, save_marker
from core.memory.rollover import (
    SUMMARY_SHARE,
    ConversationMemory,
    RolloverMarker,
)
from core.memory.summarise import fallback_summary, summary_request
from core.memory.window import (
    ContextMonitor,
    Message,
    reply_room,
)
from core.runtime.room import RoomAhead, generate_text
from core.store import StoreError
from core.tools import chat_messages
from core.vision.captions import RECENT_IMAGES, Captioner
from core.vision.images import (
    IMAGE_MIME,
    AttachedImage,
    StoredImage,
    is_image,
    load_stored,
    prepare_image,
)

if TYPE_CHECKING:
    from core.config import Settings
    from core.remote.backend import Backend
    from core.runtime.store_thread import StoreThread


class ChatModel(Protocol):
    """What ChatContext uses of the model lifecycle (core.runtime.models.ModelLifecycle):
    the state's label, context_size and info, the backend for summaries, and ensure()."""

    state: Any
    backend: Backend

    async def ensure(self) -> bool: ...


class ObservedTurn(Protocol):
    """The parts of a finished turn the context monitor learns from."""

    conversation_id: str
    request: GenerationRequest

DOCS_SHARE = 0.35  # at most this share of the context goes to document excerpts
TRANSCRIPT_SHARE = 0.45  # of the context, for the transcript in a summarise request
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _load_images(store: Any, conversation_id: str) -> list[AttachedImage]:
    """Store thread: the conversation's image rows whose stored copy is still on disk."""
    out = []
    for row in store.attachments(conversation_id):
        if (row.mime or "").startswith("image/"):
            image = load_stored(row.path)
            if image is not None:
                out.append(AttachedImage(row.alias, row.created_at, image))
    return out


def _sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(flat) if len(s) > 3]


@dataclass(frozen=True, slots=True)
class AttachResult:
    """A document attached to a conversation (what the composer's chips show)."""

    conversation_id: str
    alias: str
    path: str
    kind: str
    units: int  # pages, slides or sheets
    tokens: int
    whole: bool  # small: goes into the prompt whole; else chunked and retrieved
    chunks: int
    image: StoredImage | None = None  # set for an image: what the chat card shows

    @property
    def label(self) -> str:
        if self.image is not None:
            return f"{self.alias} ({self.image.width}×{self.image.height} image)"
        unit = {"pdf": "page", "pptx": "slide", "xlsx": "sheet"}.get(self.kind)
        size = f"{self.units} {unit}{'s' if self.units != 1 else ''}" if unit else self.kind
        how = "whole" if self.whole else f"{self.chunks} chunks"
        return f"{self.alias} ({size}, {how})"

    @classmethod
    def of(cls, conversation_id: str, result: IngestResult) -> AttachResult:
        return cls(
            conversation_id, result.alias, result.path, result.kind, result.units,
            result.tokens, result.whole, len(result.chunks),
        )


@dataclass(frozen=True, slots=True)
class DocContext:
    """The document block of one turn and the sources it cites."""

    text: str = ""
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """What start_turn sends: messages, session, and what the chat view should show."""

    messages: tuple[Message, ...]
    session_id: str
    marker: RolloverMarker | None = None
    sources: tuple[str, ...] = ()
    projected_use: float = 0.0
    waited: bool = False  # the turn waited for a summary (never: they are written ahead)


class ChatContext:
    """Documents and memory for every conversation of one Runtime."""

    def __init__(self, settings: Settings, models: ChatModel, store: StoreThread, *,
                 utility: UtilityWorker | None = None) -> None:
        self.settings = settings
        self.models = models
        self.store = store
        self.utility = utility or UtilityWorker()
        if self.utility.gate is None:  # the reader's model counts against the pool's budget
            self.utility.gate = models.pool
        self.docs = DocsService()  # registries and indexes here; embedding in the worker
        self.threshold = 0.7
        self._monitors: dict[int, ContextMonitor] = {}
        # The end of the context, met ahead: summaries written in the background, the
        # session they start prefilled, a context overflow rolled over (core.runtime.room).
        self.room = RoomAhead(settings, models, store, self.monitor, self._memory)
        self.ahead = self.room.ahead
        self._loaded: set[str] = set()
        self._images: dict[str, dict[str, AttachedImage]] = {}  # conversation -> alias -> image
        # The "vision" role worker; its model counts against the pool's budget too.
        self.captioner = Captioner(lambda: self.settings, gate=models.pool)
        # Called with (conversation_id, stage) where stage is "summarising" or "done".
        self.listeners: list[Callable[[str, str], None]] = []

    # -- documents ---------------------------------------------------------------------------
    async def ensure_loaded(self, conversation_id: str) -> None:
        """Bring a conversation's stored attachments into memory (once per runtime)."""
        if conversation_id in self._loaded:
            return
        results = await self.store.call(load_results, self.store.handle, conversation_id)
        images = await self.store.call(_load_images, self.store.handle, conversation_id)
        if conversation_id not in self._loaded:
            self._loaded.add(conversation_id)
            for result in results:
                self.docs.add_result(conversation_id, result)
            for attached in images:
                self.docs.registry(conversation_id).add(attached.image.path, alias=attached.alias)
                self._images.setdefault(conversation_id, {})[attached.alias] = attached

    async def images(self, conversation_id: str | None) -> list[AttachedImage]:
        """The conversation's images in the order attached (the chat shows each as a card)."""
        if conversation_id is None:
            return []
        await self.ensure_loaded(conversation_id)
        return sorted(self._images.get(conversation_id, {}).values(), key=lambda a: a.created_at)

    async def attachments(self, conversation_id: str | None) -> list[Attachment]:
        if conversation_id is None:
            return []
        await self.ensure_loaded(conversation_id)
        return self.docs.registry(conversation_id).all()

    def check_mentions(self, conversation_id: str | None, text: str) -> MentionResolution:
        if conversation_id is None:
            return AttachmentRegistry().resolve(text)
        return self.docs.check_mentions(conversation_id, text)

    async def attach(
        self, conversation_id: str | None, paths: Sequence[str | Path],
        progress: Callable[[str, str, int, int], None] | None = None,
    ) -> list[AttachResult | DocError]:
        """Attach several files at once; a bad one is a DocError and changes nothing.

        Without a conversation, one is created, but only when some file was attached.
        `progress(file_name, stage, done, total)` follows the reading and embedding;
        cancelling the call stops the work and changes nothing.
        """
        paths = [Path(str(p)).expanduser() for p in paths]
        if conversation_id is not None:
            await self.ensure_loaded(conversation_id)
            registry = self.docs.registry(conversation_id)
        else:
            registry = AttachmentRegistry()
        aliases = [registry.add(p).alias for p in paths]  # in order: a.pdf, then a.pdf #2
        try:
            results = await asyncio.gather(
                *(self._ingest(p, a, progress) for p, a in zip(paths, aliases, strict=True)))
        except asyncio.CancelledError:
            for alias in aliases:
                registry.remove(alias)
            raise
        for alias, result in zip(aliases, results, strict=True):
            if isinstance(result, DocError):
                registry.remove(alias)
        if not any(isinstance(r, IngestResult | StoredImage) for r in results):
            return list(results)  # type: ignore[arg-type]
        if conversation_id is None:
            try:
                conversation_id = await self.store.call(
                    self.store.handle.create_conversation, model=self.models.state.label
                )
            except StoreError as exc:  # a full disk: every file was read, none can be kept
                for alias in aliases:
                    registry.remove(alias)
                return [r if isinstance(r, DocError) else DocError(
                    "UNREADABLE", f"{r.alias} was read but not saved: {exc.message}", r.path)
                    for r in results]
            self._loaded.add(conversation_id)
        out: list[AttachResult | DocError] = []
        for alias, result in zip(aliases, results, strict=True):
            if isinstance(result, DocError):
                out.append(result)
                continue
            if isinstance(result, StoredImage):
                out.append(await self._save_image(conversation_id, alias, result))
                continue
            try:
                await self.store.call(
                    save_result, self.store.handle, conversation_id, result
                )
            except Exception as exc:  # noqa: BLE001 - the store's errors carry a sentence
                self.docs.registry(conversation_id).remove(result.alias)
                out.append(DocError("UNREADABLE", f"{result.alias} was read but not saved: {exc}",
                                    result.path))
                continue
            self.docs.add_result(conversation_id, result)
            out.append(AttachResult.of(conversation_id, result))
        return out

    async def _save_image(self, conversation_id: str, alias: str,
                          image: StoredImage) -> AttachResult | DocError:
        """Store the image's row (the stored copy's path); the chat then shows its card."""
        try:
            await self.store.call(
                self.store.handle.add_attachment, conversation_id, alias, image.path,
                mime=IMAGE_MIME, size=image.size_bytes, text="")
        except Exception as exc:  # noqa: BLE001 - the store's errors carry a sentence
            return DocError("UNREADABLE", f"{alias} was read but not saved: {exc}", image.path)
        self.docs.registry(conversation_id).add(image.path, alias=alias)
        self._images.setdefault(conversation_id, {})[alias] = AttachedImage(
            alias, time.time(), image)
        return AttachResult(conversation_id, alias, image.path, "image", 1, 0, True, 0, image)

    async def attach_tool_images(self, conversation_id: str,
                                 paths: Sequence[str]) -> list[AttachedImage]:
        """Make the stored images a tool returned (an MCP image result) attachments of the
        conversation, as /attach of an image does; paths without a stored image's sidecar
        (the python tool's figures) are left alone."""
        await self.ensure_loaded(conversation_id)
        out: list[AttachedImage] = []
        for path in paths:
            image = await asyncio.to_thread(load_stored, path)
            if image is None:
                continue
            alias = self.docs.registry(conversation_id).add(Path(image.name)).alias
            saved = await self._save_image(conversation_id, alias, image)
            if isinstance(saved, DocError):
                self.docs.registry(conversation_id).remove(alias)
                continue
            out.append(self._images[conversation_id][alias])
        return out

    async def tool_images_text(self, images: Sequence[AttachedImage]) -> str | None:
        """What the follow-up generation gets for images a tool returned: None when the
        chat model sees them itself (they go in as image parts), else the vision worker's
        captions (or the notice that there is none), as for attached images."""
        if not images or await self._model_sees():
            return None
        return await self.captioner.image_block(images)

    def max_bytes(self) -> int:
        """The attachment size limit: Settings.attach_max_mb, else the default."""
        mb = getattr(self.settings, "attach_max_mb", None)
        ok = isinstance(mb, int | float) and not isinstance(mb, bool) and mb > 0
        return int(mb * 1024 * 1024) if ok else DEFAULT_MAX_BYTES

    async def _ingest(self, path: Path, alias: str,
                      progress: Callable[[str, str, int, int], None] | None = None,
                      ) -> IngestResult | StoredImage | DocError:
        limit = self.max_bytes()
        if is_image(path):  # decoded, turned upright and scaled once, in a thread
            return await asyncio.to_thread(prepare_image, path, max_bytes=limit)
        refused = await asyncio.to_thread(check_path, path, limit)
        if refused is not None:  # cheap checks first: a typo never starts the worker
            return refused
        report = None
        if progress is not None:
            def report(stage: str, done: int, total: int) -> None:
                progress(path.name, stage, done, total)
        try:
            return await self.utility.ingest(
                path, alias=alias, whole_threshold=self.docs.whole_threshold,
                max_bytes=limit, progress=report,
            )
        except UtilityWorkerError as exc:
            return DocError("UNREADABLE", f"{path.name}: {exc.message}", str(path))

    async def detach(self, conversation_id: str, alias: str) -> bool:
        """Forget an attachment (and its stored chunks)."""
        await self.ensure_loaded(conversation_id)
        store = self.store.handle

        def _delete() -> None:
            for row in store.attachments(conversation_id):
                if row.alias == alias:
                    store.delete_attachment(row.id)

        await self.store.call(_delete)
        self._images.get(conversation_id, {}).pop(alias, None)
        return self.docs.detach(conversation_id, alias)

    async def context_for(self, conversation_id: str, text: str) -> DocContext:
        """The document block for `text`: mentioned documents, or all when none is."""
        await self.ensure_loaded(conversation_id)
        docs = self.docs.selected(conversation_id, text)
        if not docs:
            return DocContext()
        parts: list[tuple[str, str]] = []
        for result in docs:
            if result.whole:
                for section in result.sections:
                    label = f"{result.alias} {section.label}" if section.label else result.alias
                    parts.append((label, section.text))
        chunked = [d.alias for d in docs if not d.whole]
        if chunked:
            query = (await self.utility.encode([text]))[0]
            hits = self.docs.index(conversation_id).search(query, self.docs.top_k, docs=chunked)
            parts.extend((h.chunk.source, h.chunk.text) for h in hits)
        budget = int(self.context_tokens() * DOCS_SHARE)
        excerpts, used = [], count_tokens(CONTEXT_HEADER)
        for source, body in parts:
            cost = count_tokens(body) + 8
            if used + cost > budget and excerpts:
                break  # the rest would crowd out the conversation itself
            excerpts.append(format_excerpt(source, body))
            used += cost
        sources = tuple(dict.fromkeys(source for source, _ in parts[: len(excerpts)]))
        return DocContext(CONTEXT_HEADER + "\n\n" + "\n\n".join(excerpts), sources)

    async def facts_for(self, conversation_id: str, question: str, k: int = 3) -> list[str]:
        """The `k` sentences of the attachments that best answer `question`, cited."""
        index = self.docs.index(conversation_id)
        if len(index) == 0:
            return []
        query = (await self.utility.encode([question]))[0]
        hits = index.search(query, 3)
        candidates = [(s, h.chunk.source) for h in hits for s in _sentences(h.chunk.text)]
        if not candidates:
            return []
        vectors = await self.utility.encode([c[0] for c in candidates])
        scores = vectors @ query
        best = sorted(range(len(candidates)), key=lambda i: -scores[i])[:k]
        return [f"{candidates[i][0]} [{candidates[i][1]}]" for i in best]

    # -- memory ------------------------------------------------------------------------------
    def context_tokens(self) -> int:
        return int(self.models.state.context_size or self.settings.context_size or 4096)

    def monitor(self) -> ContextMonitor:
        size = self.context_tokens()
        if size not in self._monitors:
            self._monitors[size] = ContextMonitor(size, threshold=self.threshold)
        monitor = self._monitors[size]
        monitor.reply_room = reply_room(size, self.settings.sampling.max_tokens)
        return monitor

    async def prepare_turn(
        self, conversation_id: str, branch: Sequence[Any], text: str, *, swap: bool = True
    ) -> PreparedTurn:
        """Messages for `text` after the stored `branch`; rolls over first when needed.
        `swap` False (a reply asked again, or continued): no summary written ahead is
        swapped in, so the turn sees the session its first answer saw."""
        docs = DocContext()
        try:
            docs = await self.context_for(conversation_id, text)
        except UtilityWorkerError:
            docs = DocContext()  # the turn still goes out, without excerpts
        images = await self.images(conversation_id)
        sees = bool(images) and await self._model_sees()
        if not sees:  # a text-only model: the images as captions from the vision worker
            docs = await self._with_images(conversation_id, docs)
        monitor = self.monitor()
        memory = self._memory(conversation_id, branch)
        info = self.models.state.info
        # An engine that runs one request at a time and cannot set one aside: a summary
        # being written would hold the turn up. One that can (llama.cpp) sets it aside
        # for the turn and goes on with it after (core.engines.turn_order).
        if info.get("max_concurrency") == 1 and not info.get("preempts"):
            self.ahead.yield_to_turn(memory.session_id)
        if not swap:
            memory.ready = None
        user = {"role": "user", "content": f"{docs.text}\n\n{text}" if docs.text else text}
        new_tokens = monitor.used([user], conversation_id)
        facts: list[str] = []
        if monitor.should_roll(memory.session, new_tokens, conversation_id):
            try:
                facts = await self.facts_for(conversation_id, text)
            except UtilityWorkerError:
                facts = []
        memory.retrieve = lambda _question: facts
        plan = await memory.aprepare(text, docs.text)
        if plan.marker is not None:  # swapped in (or rolled without it): no longer needed
            self.ahead.drop(plan.marker.old_session_id)
        messages = plan.messages
        if sees:  # a vision model: the newest images go into the user's message as files
            last = messages[-1]
            parts = [{"type": "image", "path": a.image.path} for a in images[-RECENT_IMAGES:]]
            parts.append({"type": "text", "text": last["content"]})
            messages = (*messages[:-1], {**last, "content": parts})
        return PreparedTurn(messages, plan.session_id, plan.marker, docs.sources,
                            plan.projected_use, plan.waited)

    def _memory(self, conversation_id: str, branch: Sequence[Any]) -> ConversationMemory:
        """The model-facing session rebuilt from the stored branch (core.memory)."""
        memory = resume_from_messages(
            conversation_id, self.monitor(), self._summariser(conversation_id), branch,
            convert=chat_messages, system_prompt=self.settings.system_prompt or None,
            background=True,
        )
        memory.ready = self.ahead.ready(memory.session_id)
        return memory

    def after_overflow(self, conversation_id: str,
                       request: GenerationRequest) -> GenerationRequest | None:
        """The request rolled over at once after a context overflow (RoomAhead)."""
        return self.room.after_overflow(conversation_id, request)

    def session_so_far(self, conversation_id: str,
                       branch: Sequence[Any]) -> tuple[tuple[dict[str, Any], ...], str]:
        """The messages the next turn will send before its new user message, and its
        session id (the worker that holds its cache): what prepare_turn builds on, without
        the new message. Opening a conversation warms exactly this (issue 33)."""
        memory = self._memory(conversation_id, branch)
        return tuple(memory.session), memory.session_id

    async def _model_sees(self) -> bool:
        """Whether the chat model takes images itself (an mlx-vlm folder, a GGUF with its
        mmproj): what the loaded model says, else what its files say."""
        if self.models.state.info.get("vision"):
            return True
        path = self.settings.model
        return bool(path) and await asyncio.to_thread(sees_images, str(path))

    async def _with_images(self, conversation_id: str, docs: DocContext) -> DocContext:
        """Put the conversation's images (captioned by the vision worker) before the
        document block; the attachment bar says while a caption is being made."""
        images = await self.images(conversation_id)
        if not images:
            return docs

        def notify(text: str) -> None:
            for listener in list(self.listeners):
                listener(conversation_id, f"describing {text}")

        try:
            block = await self.captioner.image_block(images, notify)
        finally:
            for listener in list(self.listeners):
                listener(conversation_id, "done")
        return DocContext(f"{block}\n\n{docs.text}" if docs.text else block, docs.sources)

    def _summariser(self, conversation_id: str):
        async def summarise(messages: list[Message]) -> str:
            for listener in list(self.listeners):
                listener(conversation_id, "summarising")
            try:
                return await self.summarise(conversation_id, messages)
            finally:
                for listener in list(self.listeners):
                    listener(conversation_id, "done")

        return summarise

    async def summarise(self, conversation_id: str, messages: list[Message]) -> str:
        """A summary of `messages` written by the loaded model (a real generate call)."""
        size = self.context_tokens()
        summary_tokens = max(32, int(size * SUMMARY_SHARE * 0.8))
        fallback = fallback_summary(messages, summary_tokens)
        if not await self.models.ensure():
            return fallback
        sampling = dataclasses.replace(
            self.settings.sampling.to_params(),
            temperature=0.2,
            max_tokens=min(summary_tokens, self.settings.sampling.max_tokens or summary_tokens),
        )
        request = GenerationRequest(
            request_id=uuid.uuid4().hex,
            messages=tuple(summary_request(messages, int(size * TRANSCRIPT_SHARE), summary_tokens)),
            sampling=sampling,
            session_id=f"{conversation_id}:summary",
        )
        return await generate_text(self.models.backend, request) or fallback

    @staticmethod
    def save_turn_start(store: Any, conversation_id: str, text: str, prepared: PreparedTurn) -> str:
        """Store thread: the rollover marker (if any), then the user's message."""
        if prepared.marker is not None:
            save_marker(store, prepared.marker)
        return store.add_message(conversation_id, "user", text)

    def observe(self, turn: ObservedTurn, usage: Usage) -> None:
        """Calibrate the monitor with the engine's real prompt token count, and start the
        summary in the background once the conversation is PREPARE_AT full."""
        if usage.prompt_tokens > 0:
            self.monitor().observe(turn.conversation_id, turn.request.messages, usage.prompt_tokens)
            self.room.after_turn(turn.conversation_id, turn.request, usage)

    async def close(self) -> None:
        self.room.close()
        await self.utility.shutdown()
        await self.captioner.close()
