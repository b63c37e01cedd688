"""ServiceRuntime: the app's runtime when the engine service owns the real one (issue 30).

`llmdeck` talks to this home's service (core.service) instead of running a pool of its
own. The app was written against core.runtime.Runtime; RemoteRuntime answers its async
calls over the socket. What the app reads synchronously (the model state, settings, the
worker table, the start-up page) is kept here from the service's answers and pushes, so
no frame ever waits on the socket. Calls not named here go to RemoteRuntime as they are.

Also here: a reply that another client starts in the service is pushed to this one
("turn_started") and handed to `live_listeners` at once (the open conversation's is
followed); a lost service is told to `lost_listeners`
once, and `reconnect()` starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import Settings
from core.runtime import ModelState, SandboxInfo

POLL_S = 0.5  # the mirror (worker table, sandbox, MCP listing), while connected
RECONNECT_WAIT_S = 90.0  # a call made while the service is lost waits this long for a new one
REJOIN_WAIT_S = 0.2  # each look for a service another client started (a stopped app)
START_KEY = "F10"  # the app's key to start a stopped service again (tui.app)
NOT_REPEATED = frozenset({"start_turn", "regenerate", "edit_and_resend", "continue_reply",
                          "watch_turn", "compare"})


class ServiceRuntime:
    """A Runtime-shaped client of the engine service, for the TUI."""

    def __init__(self, settings: Settings | None = None, *, model: str | None = None,
                 client_name: str = "tui", local: Any = None) -> None:
        # `local`: a core.runtime.Runtime this process owns (`--in-process`, the pilot
        # tests), served by a service in this process over a socket pair
        # (core.service.loopback): the same calls, codec and pushes as the home's service.
        self.local = local
        self._loopback: Any = None
        # Until the service answers, the home's own file (the service reads the same one):
        # the first frame's theme and the composer need them before the socket does.
        self._settings = settings or (local.settings if local is not None else Settings.load())
        self._model_override = model
        self._client_name = client_name
        self._remote: Any = None  # core.service.RemoteRuntime once started
        self._workers: list[Any] = []
        self._mirror: dict[str, Any] = {}  # the service's answers to sync face calls
        self._mcp_listed = False  # the service's MCP servers were started and listed
        self._mcp_starting: asyncio.Future[None] | None = None
        self._attached: dict[str, list[Any]] = {}  # conversation id -> its attachments
        self._first_listing: Any = None  # the sidebar's first list, asked at start()
        self._poll: asyncio.Task[None] | None = None
        self._closed = False
        self._back = asyncio.Event()  # set while connected (calls in a gap wait on it)
        # The header says "connecting…" (no state mark, no ctx) until the service answers.
        self.model = ModelState(label="connecting…", state="connecting")
        self.listeners: list[Callable[[ModelState], None]] = []
        self.lost_listeners: list[Callable[[str], None]] = []
        # Called with each live reply's summary ({turn, conversation_id, done, ...}).
        self.live_listeners: list[Callable[[dict[str, Any]], None]] = []
        # The service's notices (core.service.notices) and "conversations changed" pushes.
        self.notice_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.conversation_listeners: list[Callable[[], None]] = []
        # The service's memory stages (conversation_id, stage): "summarising…" shows here.
        self.memory_listeners: list[Callable[[str, str], None]] = []
        self.store_notice: str | None = None
        # The sentence every call answers while the service is stopped and nobody asked
        # for a new one (the app offers a key); None while connected or reconnecting.
        self.stopped: str | None = None

    # -- what the app reads without waiting --------------------------------------------
    @property
    def store_recovering(self) -> bool:
        """An in-process service's damaged database being copied (the app says so); the
        home's service does that before it listens."""
        return bool(self.local is not None and self.local.store_recovering)

    @property
    def settings(self) -> Settings:
        remote = self._remote.settings if self._remote is not None else None
        return remote if remote is not None else self._settings

    def worker_status(self) -> list[Any]:
        """The service's workers as last polled (the F4 pane reads this every second)."""
        return list(self._workers)

    def open_store_soon(self) -> None:
        """The service has the store open already (an in-process one opens it now)."""
        if self.local is not None:
            self.local.open_store_soon()

    async def list_conversations(self, *args: Any, **kwargs: Any) -> Any:
        """The sidebar's list; the first, asked with start()'s subscriptions, is answered
        from there (no change was pushed since)."""
        first, self._first_listing = self._first_listing, None
        if first is not None and not args and not kwargs:
            return first
        return await self.__getattr__("list_conversations")(*args, **kwargs)

    def take_first_page(self) -> Any:
        """The sidebar lists once start() has connected (a few ms); an in-process
        service's store read the first page already (data only, no call)."""
        return self.local.take_first_page() if self.local is not None else None

    def check_mentions(self, conversation_id: str | None, text: str) -> Any:
        """For the composer, without waiting: @doc(...) mentions against the attachments
        this client last fetched or made for the conversation (the service resolves them
        again when the turn starts)."""
        from core.wire.docs import AttachmentRegistry

        known = self._attached.get(conversation_id, []) if conversation_id else []
        return AttachmentRegistry(list(known)).resolve(text)

    async def attachments(self, conversation_id: str | None) -> list[Any]:
        """The conversation's attachments, kept for check_mentions."""
        found = list(await self._remote_call("attachments", conversation_id))
        if conversation_id is not None:
            self._attached[conversation_id] = found
        return found

    async def attach(self, conversation_id: str | None, paths: list[Any],
                     progress: Callable[[str, str, int, int], None] | None = None) -> Any:
        results = await self._remote.attach(conversation_id, paths, progress)
        cid = next((getattr(r, "conversation_id", None) for r in results
                    if getattr(r, "conversation_id", None)), conversation_id)
        if cid is not None:
            await self.attachments(cid)
        return results

    async def detach(self, conversation_id: str, alias: str) -> bool:
        done = await self._remote_call("detach", conversation_id, alias)
        await self.attachments(conversation_id)
        return done

    async def _remote_call(self, name: str, *args: Any) -> Any:
        return await self.__getattr__(name)(*args)

    def is_active_model(self, ref: str) -> bool:
        """Whether `ref` names the service's model now (Runtime.is_active_model's rule, on
        the mirrored reference and settings): opening a conversation that had another
        model switches the service's, as in process."""
        if ref in (self._mirror.get("model_ref"), self.model.label):
            return True
        from pathlib import Path

        from core.wire import model_refs

        parsed = model_refs.parse(ref)
        current = self.settings.model
        return (not parsed.is_label and current is not None
                and Path(parsed.model).expanduser() == Path(current).expanduser()
                and parsed.engine in (None, self.settings.engine or self.model.info.get("engine")))

    async def switch_model(self, path: str, engine: str | None = None,
                           bundled: bool = False) -> bool:
        """The service loads it and records it in its settings; this client's copy of the
        settings takes the new model too (else the next save would put the old one back)."""
        ok = await self._remote_call("switch_model", path, engine, bundled)
        await self._refresh_settings()
        return ok

    async def apply_preset(self, model: str | None = None,
                           label: str | None = None) -> tuple[str, bool] | None:
        """The service puts the model's preset into its settings (the next load and reply
        use them there); this client's copy takes them too."""
        applied = await self._remote_call("apply_preset", model, label)
        if applied is not None:
            await self._refresh_settings()
        return applied

    async def _refresh_settings(self) -> None:
        """The service's settings, copied field by field into the object the UI holds."""
        from core.service import ServiceCallError, ServiceUnavailable

        try:
            fresh = await self._remote.call("get_settings")
        except (ServiceCallError, ServiceUnavailable):
            return
        held = self.settings
        if isinstance(fresh, Settings) and fresh is not held:
            for f in dataclasses.fields(fresh):
                setattr(held, f.name, getattr(fresh, f.name))

    # -- the face's synchronous calls, answered from the mirror ------------------------
    def model_state(self) -> ModelState:
        return self.model

    def listen_model(self, listener: Callable[[ModelState], None]) -> None:
        self.listeners.append(listener)

    def service_client(self) -> Any:
        """The connection to the service now (None while lost): the hub's download rows
        follow the service's jobs through it (tui.hub_service_queue)."""
        return self._remote.client if self._remote is not None else None

    def engine_line(self) -> str | None:
        """The service's pid, uptime, clients, replies and memory for F4, as mirrored (a
        service in this process is no separate one: the Runtime's own line)."""
        from core.service import status_line
        from core.wire.text import visible

        if self.local is not None:
            return self.local.engine_line()
        found = self._mirror.get("service")
        return visible(status_line(found)) if isinstance(found, dict) else None

    def model_is_remote(self) -> bool:
        return bool(self._mirror.get("remote"))

    def cluster_report(self) -> str | None:
        """The service's clusters as last mirrored (F4 shows them under the workers)."""
        found = self._mirror.get("clusters")
        return found if isinstance(found, str) else None

    def tool_warning(self, name: str) -> str | None:
        """As the service's approval ask for this tool said (it carries the warning)."""
        hints = self._remote.tool_hints if self._remote is not None else {}
        return hints.get(name, (None, False))[0]

    def can_always_allow(self, name: str) -> bool:
        hints = self._remote.tool_hints if self._remote is not None else {}
        return hints.get(name, (None, False))[1]

    def sandbox_info(self) -> SandboxInfo:
        """The service's sandbox as last mirrored (limits follow the settings; `running`
        lags the service by at most one poll)."""
        found = self._mirror.get("sandbox")
        return found if isinstance(found, SandboxInfo) else SandboxInfo(0, 0, None, False)

    def apply_settings(self) -> None:
        """Nothing to do here: the service applies the settings when they are saved
        (save_settings follows); the MCP servers may have changed, so list them again."""
        self._mcp_listed = False

    def mcp_prompt_commands(self) -> dict[str, str]:
        return dict(self._mirror.get("mcp_prompt_commands") or {})

    def mcp_resources(self) -> list[tuple[str, str, str]]:
        return [tuple(r) for r in self._mirror.get("mcp_resources") or ()]  # type: ignore[misc]

    def mcp_start_soon(self) -> asyncio.Future[None] | None:
        """Ask the service to start its MCP servers (a `/` was typed); a future done once
        they are listed here, None when they were listed already or none are configured."""
        if (self._remote is None or self._mcp_listed or not self.settings.mcp_servers
                or (self._mcp_starting is not None and not self._mcp_starting.done())):
            return None
        self._mcp_starting = asyncio.ensure_future(self._mcp_start())
        return self._mcp_starting

    async def _mcp_start(self) -> None:
        from core.service import ServiceCallError, ServiceUnavailable

        try:
            self._take_mirror(await self._remote.call("mcp_start"))
            self._mcp_listed = True
        except (ServiceCallError, ServiceUnavailable):
            pass  # a server that failed says so in the F4 pane; `/` asks again

    async def mcp_prompt(self, command: str, argument: str) -> str:
        return await self._mcp_call("mcp_prompt", command, argument)

    async def mcp_save_resource(self, server: str, uri: str) -> Path:
        return await self._mcp_call("mcp_save_resource", server, uri)

    async def _mcp_call(self, name: str, *args: Any) -> Any:
        """An MCP call in the service; its failure is the McpCallError the UI words."""
        from core.service import ServiceCallError
        from core.wire.tools import McpCallError

        try:
            return await self._remote_call(name, *args)
        except ServiceCallError as exc:
            raise McpCallError(exc.message) from None

    async def remember_model(self, conversation_id: str) -> None:
        """The service's store remembers the model for the conversation; its StoreError
        (a full disk) comes back as one."""
        from core.service import ServiceCallError
        from core.wire.store import StoreError

        try:
            await self._remote_call("remember_model", conversation_id)
        except ServiceCallError as exc:
            raise StoreError("FAILED", exc.message) from None

    def _take_mirror(self, mirror: Any) -> None:
        if isinstance(mirror, dict):
            self._mirror = mirror
            self._workers = list(mirror.get("workers") or ())

    async def _refresh_mirror(self) -> None:
        from core.service import ServiceCallError, ServiceUnavailable

        with contextlib.suppress(ServiceCallError, ServiceUnavailable):
            self._take_mirror(await self._remote.call("mirror"))

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, *, preload: bool = True) -> None:
        """Connect to this home's service, starting it when none runs."""
        from core.service import RemoteRuntime, start_or_connect

        if self.local is not None:
            from core.service import Loopback

            await self.local.start(preload=preload)
            self._loopback = await Loopback.open(self.local, self._client_name)
            client = self._loopback.client
        else:
            client = await start_or_connect(self._client_name)
        remote = RemoteRuntime(client)
        remote.listeners.append(self._on_model)
        remote.lost_listeners.append(self._on_lost)
        remote.turn_listeners.append(self._on_turn_started)
        remote.notice_listeners.append(self._on_notice)
        remote.conversation_listeners.append(self._on_conversations)
        remote.memory_listeners.append(self._on_memory)
        # With the subscriptions, not after them: the mirror, and the sidebar's first list
        # (an in-process service's store read that already: take_first_page).
        also = ("mirror",) if self.local is not None else ("mirror", "list_conversations")
        answers = await remote.start(*also)
        self._remote = remote
        self._take_mirror(answers[0])
        self._first_listing = answers[1] if len(answers) > 1 else None
        self._back.set()
        self._on_model(remote.model)
        if self._model_override:  # `llmdeck --model PATH`: the service loads it
            await self.switch_model(self._model_override, None)
            self._model_override = None
        self._poll = asyncio.ensure_future(self._poll_loop())

    @property
    def lost_how(self) -> str:
        """How the service went, as it said when it closed: "stopped" (a person, a signal,
        idle), "restarting" (`llmdeck service restart`) or "crashed" (it said nothing)."""
        client = self._remote.client if self._remote is not None else None
        if client is not None and client.restarting:
            return "restarting"
        return "stopped" if client is not None and client.stopped else "crashed"

    async def reconnect(self, start: bool = True, timeout: float = 60.0) -> None:
        """After the service was lost: start one (or, `start` False, wait up to `timeout`
        for the one a restart brings) and attach again. Until then `stopped` makes calls
        fail at once."""
        if self._poll is not None:
            self._poll.cancel()
        await self._remote.reconnect(timeout=timeout, start=start)
        self.stopped = None
        self._mcp_listed = False
        await self._refresh_mirror()
        self._back.set()
        self._on_model(self._remote.model)
        self._poll = asyncio.ensure_future(self._poll_loop())

    async def rejoin(self) -> bool:
        """While stopped: attach to a service someone else started since (another window's
        F10, `llmdeck service start`, a `serve`), starting none; False when none answers."""
        from core.service import ServiceCallError, ServiceUnavailable

        if self.stopped is None or self._remote is None or self._closed:
            return False
        try:
            await self.reconnect(start=False, timeout=REJOIN_WAIT_S)
        except (ServiceUnavailable, ServiceCallError):
            return False
        return True

    @property
    def connected(self) -> bool:
        """Attached and ready: a reconnection counts once it has fetched the model."""
        return self._remote is not None and self._remote.client.connected and self._back.is_set()

    def _on_model(self, state: Any) -> None:
        if isinstance(state, ModelState):
            if self._remote is not None and state != self.model:
                asyncio.ensure_future(self._refresh_mirror())  # the model's reference
            self.model = state
            for listener in list(self.listeners):
                listener(state)

    def _on_notice(self, notice: dict[str, Any]) -> None:
        for listener in list(self.notice_listeners):
            listener(notice)

    def _on_memory(self, conversation_id: str, stage: str) -> None:
        for listener in list(self.memory_listeners):
            listener(conversation_id, stage)

    def _on_conversations(self) -> None:
        self._first_listing = None  # older than the change: the sidebar lists again
        for listener in list(self.conversation_listeners):
            listener()

    def _on_turn_started(self, summary: dict[str, Any]) -> None:
        for listener in list(self.live_listeners):
            listener(summary)

    def _on_lost(self, sentence: str) -> None:
        if self._closed:
            return
        stopped = self.lost_how == "stopped"
        if stopped:  # a person stopped it: no new one behind their back
            self.stopped = f"The llmdeck service was stopped. Press {START_KEY} to start it again."
        self._back.clear()
        if self._poll is not None:
            self._poll.cancel()
        # The header follows the connection: no model is ready while there is no service
        # (its next answer, on reconnect, says what is).
        self.model = dataclasses.replace(self.model, state="stopped" if stopped else
                                         "reconnecting", error=None)
        for listener in list(self.listeners):
            listener(self.model)
        for listener in list(self.lost_listeners):
            listener(sentence)

    async def _poll_loop(self) -> None:
        from core.service import ServiceCallError, ServiceUnavailable

        while True:
            try:
                self._take_mirror(await self._remote.call("mirror"))
            except ServiceUnavailable:
                return  # the lost event says so
            except ServiceCallError:
                pass
            await asyncio.sleep(POLL_S)

    async def watch_reply(self, conversation_id: str) -> Any:
        """The reply still streaming in that conversation (a RemoteTurn replaying from its
        start, then live), or None when none is."""
        live = [t for t in await self._remote.live_turns()
                if t.get("conversation_id") == conversation_id and not t.get("done")]
        if not live:
            return None
        return await self._remote.watch_turn(conversation_id)

    async def close(self) -> None:
        """Leave the service; its replies go on (another TUI or the next one shows them)."""
        if self._closed:
            return
        self._closed = True
        if self._poll is not None:
            self._poll.cancel()
        if self._remote is not None:
            await self._remote.close()
        if self._loopback is not None:
            await self._loopback.close()
        if self.local is not None:
            await self.local.close()

    async def save_settings(self) -> Any:
        if self._remote is None:
            return await asyncio.to_thread(self._settings.save)
        kept = await self._remote.save_settings()
        await self._refresh_mirror()  # the sandbox's limits, the MCP servers' listing
        return kept

    def _before_connected(self, name: str) -> Any:
        """A service call asked before the first connection is up (a screen opened while a
        slow start still connects: the hub's recommended list, say): it waits for the
        connection, then is asked, instead of an AttributeError in a screen's worker."""
        from core.service import RemoteRuntime, ServiceUnavailable

        if self.__dict__.get("_closed") or not inspect.iscoroutinefunction(
                getattr(RemoteRuntime, name, None)):
            raise AttributeError(name)

        async def first(*args: Any, **kwargs: Any) -> Any:
            try:
                await asyncio.wait_for(self._back.wait(), RECONNECT_WAIT_S)
            except TimeoutError:
                raise ServiceUnavailable(self.stopped or "The llmdeck service did not answer; "
                                         "see its log.") from None
            return await getattr(self, name)(*args, **kwargs)

        return first

    def __getattr__(self, name: str) -> Any:
        """Every other Runtime call (messages, start_turn, switch_model, …) is the
        service's (core.service.dispatch lists them). One made while the service is lost
        waits for the new one and is asked again (a reply's tail, a page of the sidebar);
        one that starts a reply is not repeated (it may have reached the old service)."""
        remote = self.__dict__.get("_remote")
        if name.startswith("_"):
            raise AttributeError(name)
        if remote is None:
            return self._before_connected(name)
        fn = getattr(remote, name)
        if not inspect.iscoroutinefunction(fn):
            return fn
        if name in NOT_REPEATED:
            async def once(*args: Any, **kwargs: Any) -> Any:
                from core.service import ServiceUnavailable

                if self.stopped is not None:  # the sentence with the key, not "stopping"
                    raise ServiceUnavailable(self.stopped)
                return await fn(*args, **kwargs)

            return once

        async def call(*args: Any, **kwargs: Any) -> Any:
            from core.service import ServiceUnavailable

            if self.stopped is not None:
                raise ServiceUnavailable(self.stopped)
            try:
                return await fn(*args, **kwargs)
            except ServiceUnavailable:
                if self._closed or self.stopped is not None:
                    raise ServiceUnavailable(self.stopped or "llmdeck is closing.") from None
                try:
                    await asyncio.wait_for(self._back.wait(), RECONNECT_WAIT_S)
                except TimeoutError:
                    raise ServiceUnavailable(self.stopped or "The llmdeck service did not come "
                                             "back; see its log.") from None
                return await getattr(self._remote, name)(*args, **kwargs)

        return call
