"""Runtime: the one object the UI holds, and the face every front end talks to.

RuntimeFace lists every call the UI makes, with plain data in and out, so the same
calls can cross the service's socket; Runtime answers them in process.

An async API over the model lifecycle (core.runtime.models), the store thread
(core.runtime.store_thread), turns (core.runtime.turns), tools and the chat context
(documents and memory, core.runtime.context). The calls here are thin: each says what the
UI may do and hands the work to the part that owns it. Everything slow happens elsewhere:
model work in worker processes, SQLite on the one store thread.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core import paths
from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec
from core.remote.backend import Backend
from core.runtime.library import ModelLibrary
from core.runtime.live import LiveTurnInfo, LiveTurns, TurnWatch
from core.runtime.models import ModelLifecycle, ModelState
from core.runtime.open_warm import OpenWarmer
from core.runtime.protocol import RuntimeFace, TurnHandle  # noqa: F401  (the face's names)
from core.runtime.state import SandboxInfo, context_use  # noqa: F401  (the face's names)
from core.runtime.store_thread import SIDEBAR_PAGE, StoreThread
from core.runtime.turns import Turn, TurnParts
from core.store import Conversation, Message, SearchHit, Store
from core.tools import ToolKit, chat_messages
from core.workers.pool import WorkerPool, WorkerStatus

if TYPE_CHECKING:
    from core.docs import Attachment, DocError, MentionResolution
    from core.runtime.compare import CompareRefused, Comparison
    from core.runtime.context import AttachResult, ChatContext
    from core.tools.fenced import BlockRun
    from core.vision import AttachedImage

T = TypeVar("T")
STOP_GRACE_S = 2.0  # how long close() waits for a stopped reply before ending it harder


class Runtime(ModelLibrary):
    """Async facade over models, store, turns, tools and settings; the UI's only door."""

    def __init__(self, settings: Settings | None = None, *, pool: WorkerPool | None = None,
                 model_spec: ModelSpec | None = None) -> None:
        self.settings = settings or Settings.load()
        idle = self.settings.idle_unload_minutes
        self.pool = pool or WorkerPool(idle_unload_s=idle * 60 if idle and idle > 0 else None)
        self.models = ModelLifecycle(self.settings, self.pool, spec_override=model_spec)
        self.store_thread = StoreThread()
        self.live = LiveTurns()  # every started turn runs here to its end
        self._status_task: asyncio.Task[None] | None = None
        self._closed = False
        self.tools = ToolKit.from_settings(self.settings)
        self._chat: ChatContext | None = None
        # Called with (conversation_id, stage), stage "summarising" or "done": the chat
        # context's listeners, kept here so the UI can listen before it exists.
        self.memory_listeners: list[Callable[[str, str], None]] = []
        # Opening a conversation warms its KV cache in the worker (issue 33).
        self.warmer = OpenWarmer(self.models, self.pool, self._next_turn_request)

    @property
    def chat(self) -> ChatContext:
        """Documents and long-conversation memory, made on first use: the documents and
        memory layers are ~10 ms of imports the first frame does not need (the app imports
        them in a thread once it is up, tui.warmup)."""
        if self._chat is None:
            from core.runtime.context import ChatContext

            self._chat = ChatContext(self.settings, self.models, self.store_thread)
            self._chat.listeners = self.memory_listeners
        return self._chat

    def _turn(self, cid: str, user_message_id: str, request: GenerationRequest) -> Turn:
        parts = TurnParts(models=self.models, store=self.store_thread, tools=self.tools,
                          context=self.chat, live=self.live)
        return Turn(parts, cid, user_message_id, request)

    # -- calls the UI makes instead of reaching into the parts (RuntimeFace) --------------
    def model_state(self) -> ModelState:
        """The active model as the UI shows it (label, state, error, context, info)."""
        return self.models.state

    def listen_model(self, listener: Callable[[ModelState], None]) -> None:
        """Call `listener` with the ModelState at each change of the model's state."""
        self.models.listeners.append(listener)

    def model_is_remote(self) -> bool:
        """Whether replies come from a remote endpoint (errors then name the server)."""
        return self.models.backend.kind == "remote"

    async def remember_model(self, conversation_id: str) -> None:
        """Make the conversation remember the model in use now (opening it later offers
        to switch back to it). StoreError when the store cannot take it."""
        await self.store_thread.call(self.store_thread.handle.set_conversation_model,
                                     conversation_id, self.model_ref())

    def apply_settings(self) -> None:
        """The settings were edited: the next tool call follows the new policy and limits."""
        self.tools.sync()

    def tool_warning(self, name: str) -> str | None:
        """What the approval dialog warns about a tool (None: nothing to warn about)."""
        return self.tools.policy.warning(name)

    def can_always_allow(self, name: str) -> bool:
        """Whether the approval dialog may offer 'always allow' for this tool."""
        return self.tools.policy.can_always_allow(name)

    async def run_python(self, conversation_id: str, code: str) -> BlockRun:
        """Run a fenced block in the conversation's sandbox (F8) and store the record."""
        from core.tools import run_block

        return await run_block(self, conversation_id, code)

    def sandbox_info(self) -> SandboxInfo:
        sandbox = self.tools.sandbox
        return SandboxInfo(sandbox.processes, sandbox.max_live, sandbox.unwalled(),
                           sandbox.pid is not None)

    def mcp_prompt_commands(self) -> dict[str, str]:
        """`/server.prompt` -> its hint, for every ready MCP server's prompts."""
        return self.tools.mcp.prompt_commands()

    def mcp_start_soon(self) -> asyncio.Future[None] | None:
        """Start the MCP servers in the background (a `/` was typed); a future that is done
        once they are listed, None when none had to start."""
        return self.tools.mcp.start_soon()

    def mcp_resources(self) -> list[tuple[str, str, str]]:
        """(server, uri, name) of every ready MCP server's resources."""
        return self.tools.mcp.resources()

    async def mcp_prompt(self, command: str, argument: str) -> str:
        """The text of `/server.prompt ARGUMENT`; McpCallError with the reason."""
        return await self.tools.mcp.get_prompt(command, argument)

    async def mcp_save_resource(self, server: str, uri: str) -> Path:
        """An MCP resource read into a file, to attach like a document; McpCallError."""
        return await self.tools.mcp.save_resource(server, uri)

    async def compare(self, conversation_id: str | None, text: str, other: ModelSpec,
                      label: str) -> Comparison | CompareRefused:
        """Both models ready and `text` saved: the comparison to iterate (core.runtime.compare),
        or why it cannot run."""
        from core.runtime.compare import start_compare

        return await start_compare(self, conversation_id, text, other, label)

    # -- live turns (core.runtime.live runs them) -----------------------------------------
    def live_turns(self) -> list[LiveTurnInfo]:
        """The replies running now, oldest first."""
        return self.live.infos()

    def watch_turn(self, conversation_id: str) -> TurnWatch | None:
        """A view of the reply running in that conversation: what streamed so far
        (compacted), then live until its Done; None when no reply runs there."""
        return self.live.watch(conversation_id)

    def cancel_turn(self, conversation_id: str) -> bool:
        """Stop the reply running in that conversation (its text is kept, stored as
        stopped); False when none runs there."""
        return self.live.cancel(conversation_id)

    # -- the model (core.runtime.models owns it) -------------------------------------------
    @property
    def model(self) -> ModelState:
        """What the UI shows about the active model."""
        return self.models.state

    @property
    def backend(self) -> Backend:
        """Where generations come from: the pool (local model) or a remote endpoint."""
        return self.models.backend

    @backend.setter
    def backend(self, backend: Backend) -> None:  # a cluster wraps the remote backend
        self.models.backend = backend

    @property
    def model_key(self) -> str:
        return self.models.key

    @property
    def listeners(self) -> list[Callable[[ModelState], None]]:
        """Called with the ModelState at each change of the model's state."""
        return self.models.listeners

    async def ensure_model(self) -> bool:
        """Load the configured model if it is not loaded; False (with model.error) if it can't."""
        return await self.models.ensure()

    async def reload_model(self) -> bool:
        """Unload and load the current model again (clears a crash-budget failure)."""
        return await self.models.reload()

    async def switch_model(self, path: str, engine: str | None = None,
                           bundled: bool = False) -> bool:
        """Load `path` for this and later chats; `bundled`: the model that ships inside
        llmdeck, unpacked first (about 250 MB; OSError with the sentence when the disk
        cannot take it, the current model staying)."""
        if bundled:
            from core.bundled import bundled_chat_target, provision_bundled_chat

            try:
                path = str(await asyncio.to_thread(provision_bundled_chat))
            except OSError as exc:
                folder = bundled_chat_target().parent
                raise OSError(f"Could not unpack the bundled model (about 250 MB) into {folder} "
                              f"({exc.strerror or exc}); free some space and pick it "
                              "again.") from exc
        return await self.models.switch(path, engine)

    async def spec_for(self, path: str, engine: str | None = None, context_size: int | None = None,
                       bundled: bool = False) -> ModelSpec:
        """A picked local model as the pool would load it (compare's second model): the
        bundled one unpacked first, the engine chosen from the artifact when not given
        (WorkerLoadError with its sentence when nothing can serve it)."""
        from core.runtime.compare import spec_for

        return await spec_for(path, engine, context_size or self.settings.context_size,
                              bundled=bundled)

    def model_ref(self) -> str | None:
        """What a conversation remembers of the active model (core.model_refs)."""
        return self.models.ref()

    def is_active_model(self, ref: str) -> bool:
        """Whether `ref` names the model in use now (then opening needs no switch)."""
        return self.models.is_active(ref)

    async def find_model(self, ref: str) -> tuple[str, str | None] | None:
        """(model, engine) to load for a conversation's remembered model, or None when it is
        no longer here (models.find)."""
        return await self.models.find(ref)

    # -- the store (core.runtime.store_thread owns it) ------------------------------------
    def open_store_soon(self) -> None:
        """Open the store and read the sidebar's first page now (StoreThread.open_soon)."""
        self.store_thread.open_soon()

    def take_first_page(self) -> list[Conversation] | None:
        """The first page that open_store_soon read, if it is there now (never waits);
        given out once, None otherwise."""
        return self.store_thread.take_first_page()

    @property
    def store_notice(self) -> str | None:
        """Said once the store is open when a damaged database was replaced (for the UI)."""
        return self.store_thread.notice

    @property
    def store_recovering(self) -> bool:
        """True while a damaged database is being copied (start() still waits)."""
        return self.store_thread.recovering

    @property
    def store_handle(self) -> Store:
        """The open store; StoreError (with its sentence) when it could not be opened."""
        return self.store_thread.handle

    async def store_call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.store_thread.call(fn, *args, **kwargs)

    def store_call_nowait(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a write on the store thread without waiting (ordered with other calls)."""
        self.store_thread.call_nowait(fn, *args)

    # -- lifecycle -------------------------------------------------------------
    async def start(self, *, preload: bool = True) -> None:
        await self.store_thread.open()
        if preload:
            self.models.preload()
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
        # Each running reply stops and is stored as stopped: an engine stops between two
        # tokens; one that does not within the grace is ended by the pool's shutdown below.
        self.live.cancel_all()
        self.warmer.close()
        await self.live.settle(STOP_GRACE_S)
        self.models.stop_loading()
        if self._status_task is not None:
            self._status_task.cancel()
            from core.workers.status_file import status_path

            status_path().unlink(missing_ok=True)
        if self._chat is not None:
            await self._chat.close()
        await self.models.close()
        await self.live.settle(STOP_GRACE_S, force=True)  # stored before the store closes
        await self.tools.close()
        await self.store_thread.close()

    def engine_line(self) -> str | None:
        """F4's line about the engine the app talks to: None here, where it is the app."""
        return None

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
        """The active branch's last `limit` messages, or the page just before `before`.
        The newest page means the conversation is being opened: its cache warms meanwhile."""
        if before is None:
            self.warmer.soon(conversation_id)
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

        page = await self.store_call(_around)
        self.warmer.soon(conversation_id)  # after the switch: the branch the next turn extends
        return page

    async def _next_turn_request(self, conversation_id: str) -> GenerationRequest | None:
        """What the conversation's next turn will send, less its new message: the stored
        branch as start_turn reads it, the session the chat context rebuilds from it, the
        turn's system prompt, tools and thinking (warmed on open, core.runtime.open_warm)."""
        history = await self.store_call(self.store_handle.messages, conversation_id, 400)
        if not history:
            return None
        messages, session_id = self.chat.session_so_far(conversation_id, history)
        if not any(m.get("role") != "system" for m in messages):
            return None
        return replace(self._request(conversation_id, [], ""), messages=messages,
                       session_id=session_id, tools=self.tools.offer(self.models.state.info))

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
            return self._turn(cid, mid, self._request(cid, history[-200:], text))
        mid = await self.store_call(self.chat.save_turn_start, store, cid, text, prepared)
        request = replace(self._request(cid, [], text), messages=prepared.messages,
                          session_id=prepared.session_id)
        turn = self._turn(cid, mid, request)
        turn.rollover, turn.sources = prepared.marker, prepared.sources
        turn.waited_for_summary = prepared.waited
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
            thinking=self.settings.thinking,
            interactive=True,  # a person waits for it: ahead of API traffic (issue 45)
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
            prepared = await self.chat.prepare_turn(cid, history, user.content, swap=False)
        except Exception:
            return self._turn(cid, user.id, request)
        turn = self._turn(cid, user.id, replace(request, messages=prepared.messages,
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

    async def continue_reply(self, conversation_id: str, message_id: str) -> Turn:
        """Go on with reply `message_id`, cut at its length limit: the model continues from
        its text (the cached prefix) and the new text is appended to the same message."""
        msg = await self.store_call(self.store_handle.get_message, message_id)
        if msg is None:
            raise LookupError("That message no longer exists.")
        if msg.role != "assistant" or msg.status != "cut" or msg.parent_id is None:
            raise LookupError("Only a reply cut at its length limit can be continued.")
        size = int(self.models.state.context_size or 0)
        if size and int((msg.usage or {}).get("context_used") or 0) >= size:
            # The model would start with its context full: the engine refuses, and the
            # reply would be stored as failed. It stays cut until the context grows.
            raise LookupError(f"This reply filled the model's whole context ({size:,} "
                              "tokens), so there is no room to go on. Raise the context size "
                              "in the settings (F3), then press g again.")
        turn = await self._turn_for_user_message(conversation_id, msg.parent_id)
        turn.request = replace(turn.request, reply_prefix=msg.content)
        turn.continues = msg
        return turn

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

