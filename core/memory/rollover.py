"""Summarise-and-rehydrate: keep chatting past the context window without forgetting.

When the monitor projects the next request over the threshold, the conversation so far
(as the model sees it, so an earlier summary is folded in) is summarised by the loaded
model through a `summarise(messages) -> str` callable, and a fresh session starts seeded
with that summary, facts retrieved for the new question and the last turns verbatim.
A `RolloverMarker` records the point: the chat view shows it, the store keeps it. The
full history is append-only and never rewritten; only what the model sees is replaced.

With `background` set (the runtime's way), no turn waits for a summary: the summary is
written off the turn from PREPARE_AT (60%) full and handed in as `ready` (a
PreparedSummary: the text and how many session messages it covers); the turn at the
threshold (70%) only swaps it in, keeping the messages after it verbatim. Until it is
ready the session goes on whole; only a prompt that would leave no room for the reply
(`ContextMonitor.reply_room`) rolls at once, with `fallback_summary`, which needs no model.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.docs.chunking import count_tokens
from core.memory.summarise import SUMMARY_PREFIX, fallback_summary
from core.memory.window import ContextMonitor, Message
from core.wire.memory import RolloverMarker

Summarise = Callable[[list[Message]], "str | Awaitable[str]"]
Retrieve = Callable[[str], Sequence[str]]

FACTS_PREFIX = "Facts retrieved for the current question:"
SUMMARY_SHARE = 0.25  # at most this share of the context goes to the summary
FACTS_SHARE = 0.15


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What to send for one user turn, and the rollover it caused (if any)."""

    messages: tuple[Message, ...]
    session_id: str
    projected_use: float
    marker: RolloverMarker | None = None
    waited: bool = False  # the turn waited for a summary written inline (never in background)


@dataclass(frozen=True, slots=True)
class PreparedSummary:
    """A summary written in the background: of the session's first `covered` messages."""

    session_id: str
    covered: int
    summary: str


def _clip(text: str, max_tokens: int) -> str:
    """Cut `text` to about `max_tokens` tokens (keeps the start, which summaries lead with)."""
    if count_tokens(text) <= max_tokens:
        return text
    words = text.split()
    while words and count_tokens(" ".join(words)) > max_tokens:
        words = words[: max(1, int(len(words) * 0.9))] if len(words) > 1 else []
    return " ".join(words) + " ..."


class ConversationMemory:
    """The model-facing session of one conversation, rolled over when it gets full.

    `prepare(user_text)` returns the messages to send (rolling over first when needed);
    `record_reply(text)` adds the answer. `history` holds every message ever sent or
    received, unchanged; `markers` every rollover.
    """

    def __init__(
        self,
        conversation_id: str,
        monitor: ContextMonitor,
        summarise: Summarise,
        *,
        retrieve: Retrieve | None = None,
        system_prompt: str | None = None,
        keep_last_messages: int = 4,
        background: bool = False,
    ) -> None:
        self.conversation_id = conversation_id
        self.monitor = monitor
        self.summarise = summarise
        self.retrieve = retrieve
        self.system_prompt = system_prompt
        self.keep_last_messages = keep_last_messages
        self.history: list[Message] = []
        self.markers: list[RolloverMarker] = []
        self.session: list[Message] = self._system()
        self.session_id = self._new_session_id()
        self._last_sent: tuple[Message, ...] = ()
        self.background = background
        self.ready: PreparedSummary | None = None  # handed in by the runtime (background)

    def _system(self) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    def _new_session_id(self) -> str:
        return f"{self.conversation_id}:{uuid.uuid4().hex[:8]}"

    def _user_message(self, user_text: str, context: str) -> Message:
        content = f"{context}\n\n{user_text}" if context else user_text
        return {"role": "user", "content": content}

    def prepare(self, user_text: str, context: str = "") -> TurnPlan:
        """Plan a turn with a synchronous `summarise` (tests, or a worker-side call)."""
        gen = self._plan(user_text, context)
        request = next(gen)
        while True:
            try:
                request = gen.send(self._call_sync(request))
            except StopIteration as stop:
                return stop.value

    async def aprepare(self, user_text: str, context: str = "") -> TurnPlan:
        """Plan a turn where `summarise` may be a coroutine (the runtime's engine call)."""
        gen = self._plan(user_text, context)
        request = next(gen)
        while True:
            result = self.summarise(request) if request is not None else None
            if inspect.isawaitable(result):
                result = await result
            try:
                request = gen.send(result)
            except StopIteration as stop:
                return stop.value

    def _call_sync(self, request: list[Message] | None) -> str | None:
        if request is None:
            return None
        result = self.summarise(request)
        if inspect.isawaitable(result):
            raise TypeError("summarise returned an awaitable; use aprepare()")
        return result

    def _plan(self, user_text: str, context: str):
        """The turn logic as a generator: yields a summarise request (or None), gets the
        summary back. One body serves both the sync and the async entry points."""
        user = self._user_message(user_text, context)
        new_tokens = self.monitor.used([user], self.conversation_id)
        projected = self.monitor.projected_use(self.session, new_tokens, self.conversation_id)
        marker = None
        waited = False
        has_turns = any(m["role"] != "system" for m in self.session)
        if self.background and has_turns:
            marker = self._swap(user_text, new_tokens, projected)
            if marker is not None:
                projected = self.monitor.projected_use(self.session, new_tokens,
                                                       self.conversation_id)
            yield None
        elif projected >= self.monitor.threshold and has_turns:
            waited = True
            summary = yield list(self.session)
            marker = self._roll(str(summary or "").strip(), user_text, new_tokens)
            projected = self.monitor.projected_use(self.session, new_tokens, self.conversation_id)
        else:
            yield None
        self.history.append({"role": "user", "content": user_text})
        messages = (*self.session, user)
        self._last_sent = messages
        # The session keeps the plain question: documents are retrieved afresh per turn.
        self.session.append({"role": "user", "content": user_text})
        return TurnPlan(messages, self.session_id, projected, marker, waited)

    def _swap(self, user_text: str, new_tokens: int, projected: float) -> RolloverMarker | None:
        """Background mode: swap in the prepared summary at the threshold, or roll at once
        (no model) when the prompt would leave no room for the reply; else nothing yet."""
        monitor, cid = self.monitor, self.conversation_id
        ready = self.ready
        if ready is not None and (ready.session_id != self.session_id
                                  or ready.covered > len(self.session)):
            ready = None  # written for another session (a branch, an earlier rollover)
        no_room = monitor.leaves_no_room(self.session, new_tokens, cid)
        if ready is not None and (projected >= monitor.threshold or no_room):
            # The messages after what the summary covers go on verbatim (as many as fit).
            tail = [m for m in self.session[ready.covered:] if m["role"] != "system"]
            return self._roll(ready.summary, user_text, new_tokens, keep=len(tail))
        if no_room:
            budget = int(monitor.context_tokens * SUMMARY_SHARE / monitor.scale(cid))
            return self._roll(fallback_summary(self.session, budget), user_text, new_tokens)
        return None

    def _roll(self, summary: str, user_text: str, new_tokens: int,
              keep: int | None = None) -> RolloverMarker:
        monitor = self.monitor
        tokens_before = monitor.used(self.session, self.conversation_id) + new_tokens
        # The share is of real tokens: the estimate is scaled by what the engine reported.
        scale = monitor.scale(self.conversation_id)
        summary = _clip(summary, int(monitor.context_tokens * SUMMARY_SHARE / scale))
        facts: list[str] = []
        if self.retrieve is not None:
            budget = int(monitor.context_tokens * FACTS_SHARE)
            for fact in self.retrieve(user_text):
                if count_tokens("\n".join([*facts, fact])) <= budget:
                    facts.append(fact)  # a fact too long is skipped; shorter ones may fit
        seed = self._system()
        seed.append({"role": "system", "content": f"{SUMMARY_PREFIX}\n{summary}"})
        if facts:
            seed.append(
                {
                    "role": "system",
                    "content": FACTS_PREFIX + "\n" + "\n".join(f"- {f}" for f in facts),
                }
            )
        turns = [m for m in self.session if m["role"] != "system"]
        keep = min(self.keep_last_messages if keep is None else keep, len(turns))
        # Carry the last turns verbatim, fewer if they would put us over the threshold again.
        while True:
            kept = turns[len(turns) - keep :] if keep else []
            candidate = [*seed, *kept]
            use = monitor.projected_use(candidate, new_tokens, self.conversation_id)
            roomy = not monitor.leaves_no_room(candidate, new_tokens, self.conversation_id)
            if (use < monitor.threshold and roomy) or keep == 0:
                break
            keep -= 1
        # A session must not open with an assistant turn (or a tool result) after the system
        # messages.
        while kept and kept[0]["role"] in ("assistant", "tool"):
            kept = kept[1:]
        old_session = self.session_id
        self.session = [*seed, *[dict(m) for m in kept]]
        self.session_id = self._new_session_id()
        marker = RolloverMarker(
            conversation_id=self.conversation_id,
            seq=len(self.markers) + 1,
            at_message=len(self.history),
            old_session_id=old_session,
            new_session_id=self.session_id,
            summary=summary,
            facts=tuple(facts),
            kept_messages=len(kept),
            seed=tuple(dict(m) for m in self.session),
            tokens_before=tokens_before,
            tokens_after=monitor.used(self.session, self.conversation_id) + new_tokens,
            context_tokens=monitor.context_tokens,
        )
        self.markers.append(marker)
        return marker

    @classmethod
    def resume(
        cls,
        conversation_id: str,
        monitor: ContextMonitor,
        summarise: Summarise,
        history: Sequence[Message],
        markers: Sequence[RolloverMarker] = (),
        **options: Any,
    ) -> ConversationMemory:
        """Rebuild the memory of a conversation reopened from the store.

        `history` is the user/assistant messages (markers excluded); the model-facing
        session is the last marker's seed plus everything said after it.
        """
        memory = cls(conversation_id, monitor, summarise, **options)
        memory.history = [{"role": m["role"], "content": m["content"]} for m in history]
        memory.markers = list(markers)
        if memory.markers:
            last = memory.markers[-1]
            memory.session = [dict(m) for m in last.seed]
            memory.session += [dict(m) for m in memory.history[last.at_message :]]
            memory.session_id = last.new_session_id
        else:
            memory.session = memory._system() + [dict(m) for m in memory.history]
        return memory

    def record_reply(self, text: str, prompt_tokens: int | None = None) -> None:
        """Add the assistant's answer; `prompt_tokens` (from Usage) calibrates the monitor."""
        if prompt_tokens:
            self.monitor.observe(self.conversation_id, self._last_sent, prompt_tokens)
        reply = {"role": "assistant", "content": text}
        self.history.append(dict(reply))
        self.session.append(reply)
