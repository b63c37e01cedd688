"""Turn: one user message and the assistant reply streaming for it.

A reply is one or more generations: when one ends with tool calls, a tool round runs them
and the model goes on with the results. Each generation is saved as its own assistant
message by a ReplyRecorder while it streams. A Turn gets the few parts it uses handed in
(TurnParts), never the Runtime, so it can be read (and tested) on its own.

Once started (the first `events()`, or `start()`), a turn runs in a task of the Runtime's
(core.runtime.live) to its end, whoever watches: `events()` is one watcher of it, and
leaving it does not stop the reply; `cancel()` does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from core.engines.base import GenerationRequest
from core.events import Done, Error, Event, TextDelta, ToolCall, Usage
from core.runtime.live import LiveTurns, TurnFeed, TurnWatch
from core.runtime.models import ModelLifecycle
from core.runtime.recorder import ReplyRecorder
from core.runtime.store_thread import StoreThread
from core.runtime.tool_round import ToolImages, ToolRound
from core.store import StoreError
from core.tools import Approver, ToolKit, ToolStatus
from core.tools.loop import MAX_ROUNDS


class TurnContext(ToolImages, Protocol):
    """What a turn needs of the chat context: images for the tool round, and to learn the
    engine's real prompt size (the memory monitor's calibration)."""

    def observe(self, turn: Any, usage: Usage) -> None: ...

    def after_overflow(self, conversation_id: str,
                       request: GenerationRequest) -> GenerationRequest | None: ...


@dataclass(frozen=True)
class TurnParts:
    """The collaborators of a turn, handed in by the Runtime."""

    models: ModelLifecycle  # ensure(), state (label, error, info), backend
    store: StoreThread
    tools: ToolKit
    context: TurnContext
    live: LiveTurns  # runs the turn as a task once it starts


class Turn:
    """One user message and the assistant reply streaming for it."""

    def __init__(self, parts: TurnParts, conversation_id: str, user_message_id: str,
                 request: GenerationRequest) -> None:
        self._parts = parts
        self.conversation_id = conversation_id
        self.user_message_id = user_message_id
        self.request = request
        self.assistant_message_id: str | None = None
        self.cancelled = False
        self.approve: Approver | None = None  # asked before a tool runs; None = deny all
        self.max_rounds = MAX_ROUNDS
        self._round: ToolRound | None = None
        self.rollover: Any = None  # a memory RolloverMarker when this turn started a new session
        self.continues: Any = None  # the stored reply (cut) this turn goes on writing, if any
        self.overflow_retries = 0  # retried once, silently, with a rolled context
        self.waited_for_summary = False  # set by start_turn (never, with summaries ahead)
        self.sources: tuple[str, ...] = ()  # documents cited in this turn's context
        # Set when the reply could not be (fully) saved; events() reports it before Done.
        self.store_error: Error | None = None
        self.turn_id = uuid.uuid4().hex[:12]
        self.feed = TurnFeed()  # what every watcher reads
        self._started = False

    def start(self) -> None:
        """Run the reply to its end in a task of the Runtime's (once; later calls do
        nothing). Set `approve` and `max_rounds` before."""
        if not self._started:
            self._started = True
            self._parts.live.start(self, self.turn_id, self._parts.models.state.label)

    def events(self) -> TurnWatch:
        """Watch the reply (starting it if needed): its events from the first, consecutive
        deltas merged when the watcher falls behind, then live until Done. The reply is
        saved as it streams; a watcher that stops iterating does not stop it."""
        self.start()
        return self.feed.watch(self.cancel)

    async def run(self) -> None:
        """The reply from start to end, into the feed (the live-turn task runs this)."""
        try:
            async for event in self._stream():
                self.feed.publish(event)
        except Exception as exc:
            self.feed.end(exc)  # every watcher gets it, as the one consumer did before
        except BaseException:  # the task cancelled (Runtime.close): the watchers just end
            self.feed.end()
            raise
        else:
            self.feed.end()

    def cancel(self) -> None:
        self.cancelled = True
        self._parts.models.backend.cancel(self.request.request_id)
        if self._round is not None:
            self._round.cancel()

    async def _stream(self) -> AsyncIterator[Event | ToolStatus]:
        """The reply's events, saved as they stream.

        When a generation ends with tool calls, each call is shown (ToolStatus), approved,
        run and stored as a `tool` message, and the model goes on with the results: one
        Done at the very end, at most `max_rounds` generations.
        """
        parts = self._parts
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
            tool_round = ToolRound(parts.tools, parts.store, parts.context,
                                   self.conversation_id, self.approve)
            last = round_no == self.max_rounds
            self._round = tool_round
            try:
                async for status in tool_round.run(calls, limit=self.max_rounds if last else None):
                    yield status
            finally:
                self._round = None
            try:
                parent_id = await tool_round.save(assistant_id)
            except StoreError as exc:
                yield Error("STORE_FAILED", f"{exc.message} The tool results were not saved.")
                yield Done("error")
                return
            if self.cancelled or last:
                yield Done("cancelled" if self.cancelled else "tool_calls")
                return
            follow = await tool_round.follow_up("".join(text), calls)
            self.request = replace(self.request, request_id=uuid.uuid4().hex,
                                   messages=self.request.messages + follow, reply_prefix="")

    async def _generate(self, parent_id: str) -> AsyncIterator[Event]:
        """One generation of the reply, saved as one assistant message under `parent_id`."""
        models = self._parts.models
        recorder = ReplyRecorder(self._parts.store, self.conversation_id,
                                 model=models.state.label, parent_id=parent_id,
                                 continues=self.continues)
        self.continues = None  # a tool round's follow-up is a message of its own
        try:
            ok = await models.ensure()
            recorder.context_size = int(models.state.context_size or 0)
            if ok and not self.cancelled and not self.request.tools:
                tools = self._parts.tools
                await tools.prepare(models.state.info)  # MCP servers start on first use
                self.request = replace(self.request, tools=tools.offer(models.state.info))
            # Checked after every await before the stream opens: a cancel in that gap finds
            # no open stream in the backend and would otherwise be lost.
            if not ok or self.cancelled:
                if not self.cancelled:
                    error = Error("LOAD_FAILED", models.state.error or "The model is not available.")
                    recorder.record(error)
                    yield error
                done = Done("cancelled" if self.cancelled else "error")
                recorder.record(done)
                yield done
                return
            resent = False
            while True:
                overflow: list[Event] = []  # a CONTEXT_OVERFLOW before any output, held
                async for event in models.backend.generate(self.request):
                    if self.cancelled and not resent:  # cancelled while the stream was opening
                        resent = True
                        models.backend.cancel(self.request.request_id)
                    if overflow or (isinstance(event, Error) and event.code == "CONTEXT_OVERFLOW"
                                    and not self.overflow_retries and recorder.empty):
                        overflow.append(event)
                        continue
                    if isinstance(event, Usage):
                        self._parts.context.observe(self, event)
                    recorder.record(event)
                    yield event
                if not overflow:
                    break
                self.overflow_retries += 1
                rolled = None if self.cancelled else self._parts.context.after_overflow(
                    self.conversation_id, self.request)
                if rolled is None:  # nothing to roll: the overflow is the answer after all
                    for event in overflow:
                        recorder.record(event)
                        yield event
                    break
                self.request = rolled
        finally:
            self.store_error = await recorder.finish(cancelled=self.cancelled)
            self.assistant_message_id = recorder.message_id
