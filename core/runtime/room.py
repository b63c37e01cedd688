"""The end of the context, met ahead: what ChatContext does so no turn waits for room.

From PREPARE_AT full the session's summary is written in the background, asked after the
session itself so the engine reuses its KV cache (core.memory.ahead keeps it until the
turn at the threshold swaps it in); once written, the session it will start is prefilled
while the person reads (at once on MLX, which keeps several caches; on llama.cpp, which
keeps one, once the next turn will swap); on an engine that runs one request at a time
a summary still being written yields to the conversation's next turn; and a context
overflow the engine reports is rolled over at once (no model) for one silent retry.
It is handed the settings, the model lifecycle, the store thread and two of
ChatContext's functions (the monitor, the memory rebuilt from a branch); it never holds
ChatContext itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from core.engines.base import GenerationRequest
from core.events import Done, Error, TextDelta, Usage
from core.memory.ahead import SummariesAhead
from core.memory.rollover import SUMMARY_SHARE, ConversationMemory
from core.memory.summarise import SUMMARY_PREFIX, fallback_summary, summary_followup
from core.memory.window import PREPARE_AT, ContextMonitor, Message, messages_tokens

AHEAD_SUMMARY_TOKENS = 256  # the most a summary written ahead may take
HISTORY_PAGE = 400  # messages of the active branch read to rebuild the session


async def generate_text(backend: Any, request: GenerationRequest) -> str:
    """The reply's text ('' after an error)."""
    pieces: list[str] = []
    async for event in backend.generate(request):
        if isinstance(event, TextDelta):
            pieces.append(event.text)
        elif isinstance(event, Error):
            return ""
        elif isinstance(event, Done):
            break
    return "".join(pieces).strip()


class RoomAhead:
    """Background summaries, warm-ups and overflow roll-overs of one ChatContext."""

    def __init__(self, settings: Any, models: Any, store: Any,
                 monitor: Callable[[], ContextMonitor],
                 memory: Callable[[str, Sequence[Any]], ConversationMemory]) -> None:
        self.settings = settings
        self.models = models
        self.store = store
        self.monitor = monitor
        self._memory = memory
        self.ahead = SummariesAhead()
        self.warmed: set[str] = set()  # sessions whose successor was prefilled ahead
        self._warming: set[asyncio.Future[None]] = set()

    def context_tokens(self) -> int:
        return int(self.models.state.context_size or self.settings.context_size or 4096)

    def after_turn(self, conversation_id: str, request: GenerationRequest, usage: Usage) -> None:
        """A generation ended (its Usage): start the summary when it is time, and on a
        one-at-a-time engine warm a summary written earlier once it will be swapped in."""
        self.prepare_summary(conversation_id, request, usage)
        if self.models.state.info.get("max_concurrency") == 1:
            self._warm_when_ready(conversation_id, request.session_id or conversation_id)

    def close(self) -> None:
        self.ahead.close()
        for task in list(self._warming):
            task.cancel()

    def prepare_summary(self, conversation_id: str, request: GenerationRequest,
                        usage: Usage) -> None:
        """From PREPARE_AT full, write the summary of the session so far in the background
        (its first generation's messages, less the new question), once per session."""
        session = request.session_id or conversation_id
        messages = request.messages
        size = self.context_tokens()
        full = (usage.prompt_tokens + usage.completion_tokens) / size
        # A small context whose reply room comes first starts sooner (a tenth before it).
        start = min(PREPARE_AT, 1.0 - self.monitor().reply_room / size - 0.1)
        if (full < start or session in self.ahead or request.reply_prefix
                or len(messages) < 2 or messages[-1].get("role") != "user"):
            return
        covered = list(messages[:-1])
        self.ahead.start(session, len(covered), self.summarise_after(session, covered))

    async def summarise_after(self, session_id: str, messages: list[Message]) -> str:
        """A summary of the session `messages`, asked for after them in the same session:
        the engine reuses their KV cache (the turn just before left it) and prefills only
        the request, so writing it ahead costs little more than its own tokens."""
        size = self.context_tokens()
        # Short enough to be written in the few turns between PREPARE_AT and the end of
        # the room (a model that never stops writes all of it), and it leaves the fresh
        # session more room: an eighth of the context, at most AHEAD_SUMMARY_TOKENS.
        summary_tokens = max(32, min(int(size * SUMMARY_SHARE * 0.5), AHEAD_SUMMARY_TOKENS))
        cid = session_id.split(":")[0]
        fallback = fallback_summary(messages, int(summary_tokens / self.monitor().scale(cid)))
        ask = summary_followup(summary_tokens)
        room = size - self.monitor().used([*messages, ask], cid) - 16
        if room < 32 or self.models.state.state != "ready":
            return fallback  # nothing is loaded for it, and the turns must not wait
        sampling = dataclasses.replace(self.settings.sampling.to_params(), temperature=0.2,
                                       max_tokens=min(summary_tokens, room))
        request = GenerationRequest(request_id=uuid.uuid4().hex, messages=(*messages, ask),
                                    sampling=sampling, session_id=f"{session_id}:summary",
                                    aside=True)
        summary = await generate_text(self.models.backend, request)
        if summary:
            await self._warm_swap(cid, session_id, len(messages), summary)
        return summary or fallback

    async def _warm_swap(self, conversation_id: str, session_id: str, covered: int,
                         summary: str) -> None:
        """Prefill the session the summary will start (its seed and the messages kept
        after it) while the person reads, so the turn that swaps it in prefills only its
        own message. MLX keeps several caches, so at once; llama.cpp keeps one, so only
        once the next turn will swap (a question the size of the last one takes it past
        the threshold, or leaves no room for the reply): before, it would take the cache
        the next turn still needs."""
        info = self.models.state.info
        serial = info.get("max_concurrency") == 1
        if session_id in self.warmed or (info.get("engine") != "mlx" and not serial):
            return
        branch = await self.store.call(self.store.handle.messages, conversation_id, HISTORY_PAGE)
        memory = self._memory(conversation_id, branch)  # a throwaway: rolled here only
        monitor = memory.monitor
        if memory.session_id != session_id:
            return  # it rolled over meanwhile
        asked = messages_tokens([m for m in memory.session if m["role"] == "user"][-1:],
                                monitor.count)
        if serial and not (
                monitor.projected_use(memory.session, asked, conversation_id) >= monitor.threshold
                or monitor.leaves_no_room(memory.session, asked, conversation_id)):
            return
        self.warmed.add(session_id)
        tail = [m for m in memory.session[covered:] if m["role"] != "system"]
        memory._roll(summary, "", 0, keep=len(tail))
        sampling = dataclasses.replace(self.settings.sampling.to_params(), max_tokens=1)
        await generate_text(self.models.backend, GenerationRequest(
            request_id=uuid.uuid4().hex, messages=tuple(memory.session), sampling=sampling,
            session_id=f"{session_id}:warm", aside=True, thinking=self.settings.thinking))

    def _warm_when_ready(self, conversation_id: str, session_id: str) -> None:
        """After a turn on llama.cpp: the summary written earlier, warmed now if the next
        turn will swap it in (see _warm_swap)."""
        ready = self.ahead.ready(session_id)
        if ready is None or session_id in self.warmed:
            return
        task = asyncio.ensure_future(
            self._warm_swap(conversation_id, session_id, ready.covered, ready.summary))
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    def after_overflow(self, conversation_id: str,
                       request: GenerationRequest) -> GenerationRequest | None:
        """The request rolled over at once (no model: fallback_summary) after the engine
        said the prompt does not fit; None when there is nothing to roll. The monitor
        learns that its estimate was short, so the next turn rolls over properly."""
        messages = list(request.messages)
        if len(messages) < 2 or messages[-1].get("role") != "user":
            return None
        size = self.context_tokens()
        self.monitor().observe(conversation_id, messages, size + 1)
        head = [m for m in messages[:1]
                if m.get("role") == "system" and m.get("content") == self.settings.system_prompt]
        scale = self.monitor().scale(conversation_id)
        summary = fallback_summary(messages[len(head):-1], int(size * SUMMARY_SHARE / scale))
        seed = [*head, {"role": "system", "content": f"{SUMMARY_PREFIX}\n{summary}"}]
        return dataclasses.replace(
            request, request_id=uuid.uuid4().hex, messages=(*seed, messages[-1]),
            session_id=f"{conversation_id}:{uuid.uuid4().hex[:8]}")

