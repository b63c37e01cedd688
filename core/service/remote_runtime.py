"""RemoteRuntime: the Runtime's async calls, answered by the engine service.

The TUI can hold one instead of an in-process Runtime: each forwarded call (the names in
core.service.dispatch.RUNTIME_CALLS) goes over the socket and comes back decoded into
the same dataclasses. A call that starts a reply (start_turn, regenerate,
edit_and_resend) returns a RemoteTurn, whose events() yields the same events a local
Turn does (TextDelta, ToolStatus, Done, ...) and whose cancel() stops the reply in the
service, for every client watching it. watch_turn(conversation_id) attaches to a reply
that another client (or a client that went away) started.

`model` is kept fresh by the service's "model" pushes, and `listeners` are called with
it as the in-process Runtime calls its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from core.attach_errors import AttachError
from core.service import codec
from core.service.client import ServiceCallError, ServiceClient, ServiceUnavailable
from core.service.dispatch import RUNTIME_CALLS, TURN_CALLS

Decision = str  # "allow" | "deny" | "always" (core.tools.approval.Decision)


class RemoteTurn:
    """A reply streaming in the service, as seen by this client."""

    def __init__(self, client: ServiceClient, summary: dict[str, Any],
                 hints: dict[str, tuple[str | None, bool]] | None = None) -> None:
        self._client = client
        self._hints = hints if hints is not None else {}
        self.turn_id: str = summary["turn"]
        self.conversation_id: str = summary["conversation_id"]
        self.user_message_id: str | None = summary.get("user_message_id")
        self.assistant_message_id: str | None = summary.get("assistant_message_id")
        self.rollover: Any = summary.get("rollover")
        self.sources: tuple[str, ...] = tuple(summary.get("sources") or ())
        self.cancelled = False
        # Asked before a tool runs (as Turn.approve); None answers nothing and another
        # client watching may answer, or the service denies after its wait.
        self.approve: Callable[[Any], Any] | None = None
        self.finish_reason: str | None = None

    def cancel(self) -> None:
        self.cancelled = True
        asyncio.ensure_future(self._cancel())

    async def _cancel(self) -> None:
        try:
            await self._client.call("cancel_turn", turn=self.turn_id, timeout=10)
        except Exception:  # noqa: BLE001 - the service gone: the reply stopped with it
            pass

    async def events(self) -> AsyncIterator[Any]:
        """The reply's events in order; a connection lost mid-reply ends it with an Error
        and Done("error") (the service stores what arrived)."""
        from core.events import Done, Error

        # Done is held until turn_end, which names the stored reply: a caller stops reading
        # at Done (as at a local Turn's), and must find assistant_message_id set by then
        # (else a regenerate right after said "This message is not saved yet").
        done: Any = None
        try:
            async for message in self._client.turn_events(self.turn_id):
                kind = message.get("event")
                if kind == "turn":
                    event = codec.decode(message.get("data"))
                    if isinstance(event, Done):
                        done = event
                    else:
                        yield event
                elif kind == "approve":
                    asyncio.ensure_future(self._answer(message))
                elif kind == "turn_end":
                    self.assistant_message_id = message.get("assistant_message_id")
                    self.finish_reason = message.get("finish_reason")
        except ServiceUnavailable as exc:
            if done is None:
                yield Error("INTERNAL", f"{exc.message} The reply stopped there; what arrived "
                            "before is saved.")
                done = Done("error")
        if done is not None:
            yield done

    async def _answer(self, message: dict[str, Any]) -> None:
        if self.approve is None:
            return
        call = codec.decode(message.get("data"))
        name = getattr(call, "name", None)
        if isinstance(name, str):  # what the dialog asks the face (tool_warning, ...)
            warning = message.get("warning")
            self._hints[name] = (warning if isinstance(warning, str) else None,
                                 message.get("can_always") is True)
        decision = await self.approve(call)
        try:
            await self._client.call("answer_approval", ask=message.get("ask"),
                                    decision=decision, timeout=10)
        except Exception:  # noqa: BLE001 - the turn ended meanwhile
            pass


class RemoteComparison:
    """A comparison running in the service (core.runtime.compare.Comparison as this client sees
    it): events() yields SideEvents from its two turn streams, cancel() stops both
    replies, keep(side) makes one the conversation's reply."""

    def __init__(self, client: ServiceClient, summary: dict[str, Any]) -> None:
        self._client = client
        self.compare_id: str = summary["compare"]
        self.conversation_id: str = summary["conversation_id"]
        self.user_message_id: str | None = summary.get("user_message_id")
        self.cancelled = False

    async def events(self) -> AsyncIterator[Any]:
        """Both replies' events as they come, each side ending with its Done (an Error and
        Done("error") when the connection goes mid-way). Leaving early stops both."""
        from core.events import Done, Error
        from core.runtime.compare import SideEvent, merged_sides

        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def follow(side: int) -> None:
            try:
                async for message in self._client.turn_events(f"{self.compare_id}.{side}"):
                    if message.get("event") == "turn":
                        queue.put_nowait(SideEvent(side, codec.decode(message.get("data"))))
            except ServiceUnavailable as exc:
                queue.put_nowait(SideEvent(side, Error("INTERNAL", f"{exc.message} The reply "
                                                       "stopped there; what arrived is saved.")))
                queue.put_nowait(SideEvent(side, Done("error")))
            finally:
                queue.put_nowait(None)

        def stop_both() -> None:
            self.cancel()
            for task in tasks:
                task.cancel()

        tasks = [asyncio.ensure_future(follow(side)) for side in (0, 1)]
        async for item in merged_sides(queue, tasks, stop_both):
            yield item

    def cancel(self) -> None:
        self.cancelled = True
        asyncio.ensure_future(self._cancel())

    async def _cancel(self) -> None:
        try:
            await self._client.call("compare_cancel", compare=self.compare_id, timeout=10)
        except Exception:  # noqa: BLE001 - the service gone: the replies stopped with it
            pass

    async def keep(self, side: int) -> str:
        """The kept message's id; LookupError with the service's sentence otherwise."""
        from core.service.client import ServiceCallError

        try:
            return await self._client.call("compare_keep", compare=self.compare_id, side=side)
        except ServiceCallError as exc:
            raise LookupError(exc.message) from None


class RemoteRuntime:
    """What the UI holds when the service owns the Runtime."""

    def __init__(self, client: ServiceClient) -> None:
        self.client = client
        self.model: Any = None
        self._model_pushes = 0  # "model" pushes heard: one may overtake subscribe's answer
        self.settings: Any = None  # core.config.Settings, as the service holds them
        self.listeners: list[Callable[[Any], None]] = []
        # tool name -> (warning, can always allow), as the service's last approval ask
        # said: the approval dialog's synchronous questions are answered from here.
        self.tool_hints: dict[str, tuple[str | None, bool]] = {}
        # Called with each reply's summary ({turn, conversation_id, ...}) as another
        # client starts it (the service's "turn_started" push).
        self.turn_listeners: list[Callable[[dict[str, Any]], None]] = []
        # Called with a sentence when the connection to the service is lost (a crash, a
        # stop): the UI says so and calls reconnect().
        self.lost_listeners: list[Callable[[str], None]] = []
        # The service's notices ({kind, title, severity, message}, core.service.notices),
        # and its "conversations changed" pushes (the sidebar lists again).
        self.notice_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.conversation_listeners: list[Callable[[], None]] = []
        # Called with (conversation_id, stage) as Runtime.memory_listeners are: a long
        # conversation's summary under way ("summarising", "done"), an image described.
        self.memory_listeners: list[Callable[[str, str], None]] = []
        client.listeners.append(self._on_event)

    async def start(self, *also: str) -> list[Any]:
        """Fetch the model state and follow its changes, and hear of replies started by
        other clients. `also`: calls without arguments asked in the same breath, after the
        subscriptions (so a change they miss is pushed); their answers, None for one the
        service refused."""
        heard = self._model_pushes
        # Asked at once, not one after another: an app starting up answers each only when
        # its loop is free, and the first frame's ~50 ms of painting came between two of
        # six calls in a row (the sidebar showed that much later; bench/ui.py, client).
        call = self.client.call

        async def asked(name: str) -> Any:
            try:
                return await call(name)
            except ServiceCallError:
                return None

        state, self.settings, _, _, _, notices, *answers = await asyncio.gather(
            call("subscribe", topic="model"), call("get_settings"),
            call("subscribe", topic="turns"), call("subscribe", topic="conversations"),
            call("subscribe", topic="memory"), call("subscribe", topic="notices"),
            *(asked(name) for name in also))
        # A push can overtake subscribe's answer (or come while the others are answered):
        # the reader handles it before this coroutine resumes, and the answer is then the
        # older state (an app stayed "loading" after its model was ready).
        if self._model_pushes == heard:
            self.model = state
        for notice in notices or ():
            self._tell(notice)  # said before we came (the database moved aside at start)
        return answers

    def _tell(self, notice: Any) -> None:
        if isinstance(notice, dict) and isinstance(notice.get("message"), str):
            for listener in list(self.notice_listeners):
                listener(notice)

    async def save_settings(self) -> Any:
        """Send `settings` (edited here, as the UI edits Runtime.settings) to the service,
        which applies and writes them; returns what Runtime.save_settings returns."""
        return await self.client.call("save_settings", settings=self.settings)

    async def reconnect(self, timeout: float = 60.0, start: bool = True) -> None:
        """After a "lost" event (the service crashed or was stopped): start a service again
        when none runs (only wait for one when `start` is False: a restart someone else
        makes), attach to it, and fetch the model and settings afresh. A reply the crash
        cut is in the store with what arrived; watch_turn finds live ones."""
        from core.service.launch import start_or_connect, wait_to_connect

        old = self.client
        fresh = await (start_or_connect(old.name, timeout=timeout) if start
                       else wait_to_connect(old.name, timeout=timeout))
        if self._on_event in old.listeners:
            old.listeners.remove(self._on_event)
        self.client = fresh
        self.client.listeners[:0] = [self._on_event, *old.listeners]
        await old.close()
        await self.start()

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("event") == "lost":
            for listener in list(self.lost_listeners):
                listener(str(message.get("message")))
            return
        if message.get("event") == "notice":
            self._tell(message.get("data"))
            return
        if message.get("event") == "memory":
            data = message.get("data")
            if isinstance(data, dict) and isinstance(data.get("conversation_id"), str) \
                    and isinstance(data.get("stage"), str):
                for listener in list(self.memory_listeners):
                    listener(data["conversation_id"], data["stage"])
            return
        if message.get("event") == "conversations":
            for listener in list(self.conversation_listeners):
                listener()
            return
        if message.get("event") == "turn_started":
            summary = message.get("data")
            if isinstance(summary, dict) and isinstance(summary.get("conversation_id"), str):
                for listener in list(self.turn_listeners):
                    listener(summary)
            return
        if message.get("event") == "model":
            try:
                self.model = codec.decode(message.get("data"))
            except codec.CodecError:
                return
            self._model_pushes += 1
            for listener in list(self.listeners):
                listener(self.model)

    async def call(self, name: str, **args: Any) -> Any:
        return await self.client.call(name, **args)

    async def _turn(self, name: str, **args: Any) -> RemoteTurn:
        return RemoteTurn(self.client, await self.client.call(name, **args), self.tool_hints)

    async def start_turn(self, conversation_id: str | None, text: str) -> RemoteTurn:
        return await self._turn("start_turn", conversation_id=conversation_id, text=text)

    async def regenerate(self, conversation_id: str, message_id: str) -> RemoteTurn:
        return await self._turn("regenerate", conversation_id=conversation_id,
                                message_id=message_id)

    async def continue_reply(self, conversation_id: str, message_id: str) -> RemoteTurn:
        return await self._turn("continue_reply", conversation_id=conversation_id,
                                message_id=message_id)

    async def edit_and_resend(self, conversation_id: str, message_id: str,
                              text: str) -> RemoteTurn:
        return await self._turn("edit_and_resend", conversation_id=conversation_id,
                                message_id=message_id, text=text)

    async def watch_turn(self, conversation_id: str) -> RemoteTurn | None:
        """The reply streaming (or just finished) in that conversation, replayed from its
        start then live; None when none is."""
        summary = await self.client.call("watch_turn", conversation_id=conversation_id)
        return RemoteTurn(self.client, summary, self.tool_hints) if summary else None

    async def compare(self, conversation_id: str | None, text: str, other: Any,
                      label: str) -> Any:
        """Runtime.compare in the service: a RemoteComparison, or the CompareRefused."""
        result = await self.client.call("compare", conversation_id=conversation_id,
                                        text=text, other=other, label=label)
        return RemoteComparison(self.client, result) if isinstance(result, dict) else result

    async def live_turns(self) -> list[dict[str, Any]]:
        return await self.client.call("live_turns")

    async def cancel_turn(self, turn_id: str) -> bool:
        return await self.client.call("cancel_turn", turn=turn_id)

    async def attach(self, conversation_id: str | None, paths: list[Any],
                     progress: Callable[[str, str, int, int], None] | None = None) -> Any:
        def on_progress(message: dict[str, Any]) -> None:
            data = message.get("data")
            if progress is not None and message.get("event") == "progress" \
                    and isinstance(data, dict):
                progress(str(data.get("name")), str(data.get("stage")),
                         int(data.get("done", 0)), int(data.get("total", 0)))

        self.client.listeners.append(on_progress)
        typed = [str(p) for p in paths]
        try:
            results = await self.client.call("attach", conversation_id=conversation_id,
                                             paths=[typed_here(p) for p in typed])
        finally:
            self.client.listeners.remove(on_progress)
        return [said_as_typed(r, t) for r, t in zip(results, typed, strict=False)] \
            if isinstance(results, list) else results

    async def service_status(self) -> dict[str, Any]:
        return await self.client.call("status")

    async def close(self) -> None:
        """Leave the service (it goes on for the other clients and live replies)."""
        await self.client.close()


@functools.cache
def _parameter_names(name: str) -> tuple[str, ...]:
    """The Runtime method's parameter names, so positional arguments travel by name."""
    import inspect

    from core.runtime import RuntimeFace  # names only: not the pool, tools and store

    method = getattr(RuntimeFace, name, None)
    if method is None:  # a call beyond the face (compare's, say): Runtime's own
        from core.runtime import Runtime

        method = getattr(Runtime, name)
    return tuple(list(inspect.signature(method).parameters)[1:])


def _forwarder(name: str) -> Callable[..., Any]:
    async def forward(self: RemoteRuntime, *args: Any, **kwargs: Any) -> Any:
        if args:
            names = _parameter_names(name)
            if len(args) > len(names):
                raise TypeError(f"{name} takes at most {len(names)} arguments")
            kwargs.update(zip(names, args, strict=False))
        return await self.client.call(name, **kwargs)

    forward.__name__ = name
    forward.__doc__ = f"Runtime.{name}, answered by the service (always async here)."
    return forward


for _name in RUNTIME_CALLS:
    if not hasattr(RemoteRuntime, _name):
        setattr(RemoteRuntime, _name, _forwarder(_name))
assert not set(TURN_CALLS) - set(vars(RemoteRuntime))


def typed_here(path: Any) -> str:
    """A path as typed in this client's terminal, made absolute there: the detached service
    runs in a folder of its own (core.service.launch), where `notes.md` names another file
    or none."""
    return os.path.abspath(os.path.expanduser(str(path)))


def said_as_typed(result: Any, typed: str) -> Any:
    """An attach error names the file as the person typed it, not as the service was asked
    (typed_here's absolute path): `notes.md does not exist`, whatever the folder."""
    absolute = typed_here(typed)
    if isinstance(result, AttachError) and absolute != typed:
        return dataclasses.replace(result, message=result.message.replace(absolute, typed),
                                   path=typed if result.path == absolute else result.path)
    return result
