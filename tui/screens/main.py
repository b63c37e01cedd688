"""The main screen: sidebar, chat view, worker pane, composer, status line, footer.

It owns the conversation being shown and the turn streaming into it; widgets post
messages (MessageView.Action, Sidebar.Requested, ChatView.LoadOlder) and this screen
carries them out through the runtime. Whole topics live beside it, each owned by the
screen and reached through thin handlers here (Textual finds actions and handlers by
name on the screen): the footer's layout (tui.footer_layout), following a reply another
client started (live_follow), F8/F9 code runs (code_runs), message actions
(message_actions), drawing a turn's events and the composer's busy note (turn_stream).
"""

from __future__ import annotations

import asyncio
import shlex
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input, Static, TextArea

from core.events import ToolCall
from core.runtime import ModelState, context_use
from core.wire.store import StoreError
from tui import mcp_commands, slash
from tui.dropped_paths import dropped_image_paths
from tui.footer_layout import footer_bindings
from tui.screens import slash_run
from tui.screens.code_runs import CodeRuns
from tui.screens.dialogs import ConfirmScreen, PromptScreen
from tui.screens.live_follow import LiveFollow
from tui.screens.message_actions import MessageActions
from tui.screens.turn_stream import draw_events, show_composer_state
from tui.widgets.attachments import (
    AttachmentBar,
    MemoryMarker,
    SourcesLine,
    attaching,
    cancel_attach,
)
from tui.widgets.chat_view import PAGE, ChatView
from tui.widgets.composer import Composer
from tui.widgets.image_card import place_images
from tui.widgets.message_view import MessageView
from tui.widgets.quiet_footer import QuietFooter
from tui.widgets.sidebar import Sidebar, searched_as_typed
from tui.widgets.status_bar import StatusBar
from tui.widgets.worker_pane import WorkerPane

if TYPE_CHECKING:
    from core.runtime import Turn

BUSY = "A reply is still streaming; press Esc to stop it first."
NEW_CHAT = object()
"""In the outbox: Ctrl+N pressed while a reply streamed. The chats typed after it go to the
new chat, as the keys said; nothing is refused and nothing lands in the old chat."""


class MainScreen(Screen):
    """Everything a chat needs on one screen."""

    BINDINGS = [
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+f", "search", "Search"),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+b", "toggle_sidebar", "Sidebar", show=False),
        Binding("ctrl+l", "focus_composer", "Composer", show=False),
        Binding("ctrl+up", "focus_messages", "Messages", show=False),
        Binding("f1", "help", "Help"),
        Binding("f3", "settings", "Settings"),
        Binding("f4", "toggle_workers", "Workers", show=False),
        Binding("f5", "pick_model", "Model"),
        Binding("f8", "run_code", "Run code", show=False),  # F6/F7 select text in the composer
        Binding("f9", "fix_code", "Fix code", show=False),
        Binding("ctrl+t", "compare", "Compare with…", show=False),  # tui/screens/compare.py
    ]
    # Focus lands on the composer as the screen is composed, so the first frame already
    # shows it focused (on_mount's focus() would only apply a frame or two later).
    AUTO_FOCUS = "#composer"

    def __init__(self) -> None:
        super().__init__()
        self.conversation_id: str | None = None
        self.turn: Turn | None = None
        self.offline_known = False  # the service has said whether its Hub is offline
        self.code_runs = CodeRuns(self)  # F8 runs a reply's Python blocks, F9 asks for a fix
        self.message_actions = MessageActions(self)  # regenerate, edit, branches, delete
        # Messages sent while a reply streams wait here, in order, and go one after another
        # (Enter never drops or merges what was typed; Esc hands them back to the composer).
        self.outbox: deque[object] = deque()  # texts, and NEW_CHAT where Ctrl+N came
        self._sending = False  # the outbox worker runs (it may still tidy up after a turn)
        self._starting = False  # a message left the outbox; its turn is not streaming yet
        self.live = LiveFollow(self)  # replies another client started, streamed here too
        self._no_turn = asyncio.Event()
        self._no_turn.set()

    @property
    def busy(self) -> bool:
        """A reply streams, or sent messages are still on their way: nothing else may
        start a turn, switch conversations or models meanwhile."""
        return self.turn is not None or self._starting or any(
            isinstance(item, str) for item in self.outbox)

    @property
    def at_rest(self) -> bool:
        """Not busy, and the tidying after the last reply (branch labels, the sidebar) is
        done too; tests wait on this."""
        return not self.busy and not self._sending

    def queued_texts(self) -> list[str]:
        """The messages waiting in the outbox, in order (a queued new chat is not one)."""
        return [item for item in self.outbox if isinstance(item, str)]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status-bar")
        with Horizontal(id="body"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat-column"):
                # The service's client, connecting: blank until it knows what opens
                yield ChatView(id="chat", hint=self.settled)
                runtime = self.app.runtime  # type: ignore[attr-defined]
                pane = WorkerPane(runtime.worker_status, runtime.engine_line,
                                  runtime.cluster_report, id="worker-pane")
                pane.display = False
                yield pane
                yield Static("", id="slash-hint")
                yield AttachmentBar(id="attachment-bar")
                yield Composer(id="composer")
        yield QuietFooter()

    @property
    def runtime(self):
        return self.app.runtime  # type: ignore[attr-defined]

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def composer(self) -> Composer:
        return self.query_one(Composer)

    history_listed = False
    """Whether the sidebar has listed the history yet (the app lists it once at start)."""

    @property
    def settled(self) -> bool:
        """The runtime has answered (always, in process): what the chat shows is known."""
        return getattr(self.app.runtime, "connected", True)

    def on_mount(self) -> None:
        self.query_one("#slash-hint").display = False
        self.on_model_state(self.runtime.model_state())  # "connecting…", not "no model ○"
        self.query_one(StatusBar).opening = not self.settled
        mcp_commands.install(self)  # MCP prompts are slash commands too
        self.composer.focus()
        # The runtime read the newest conversations while Textual started: list them in
        # the first frame rather than one or two frames later.
        page = None if self.history_listed else self.runtime.take_first_page()
        if page is not None:
            self.query_one(Sidebar).show_conversations(page, self.conversation_id)
            self.history_listed = True

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """What the footer shows (every key stays bound either way, and F1 lists them all)."""
        return footer_bindings(super().active_bindings, self.size.width,
                               self.app.get_key_display,
                               stoppable=self.turn is not None or self.composer.editing_id is not None
                               or attaching(self))

    def on_resize(self) -> None:
        self.refresh_bindings()  # the footer keeps what fits the new width

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":  # only shown (and bound) when there is something to stop
            return (self.busy or self.live.attaching or self.composer.editing_id is not None
                    or not self.composer.has_focus or attaching(self))
        return True

    # -- runtime callbacks -------------------------------------------------------------
    def on_model_state(self, state: ModelState) -> None:
        bar = self.query_one(StatusBar)
        bar.model_label = state.label
        bar.model_state = state.state
        bar.base_model = bool(state.info.get("base_model")) and state.state == "ready"
        bar.context_size = state.context_size
        self.show_composer_state()
        self.chat.model_named(state.name, state.bundled)  # the empty chat's hint
        if state.state == "failed" and state.error:
            self.notify(state.error, title="Model", severity="error", timeout=8)

    async def opened_at_start(self) -> None:
        """Start-up has opened what it opens (the service's client: a reply it streams or
        just finished): an empty chat shows its hint, and the header its ctx, only now."""
        self.query_one(StatusBar).opening = False
        if self.conversation_id is None and not self.chat.views:
            await self.chat.show_empty()
        # Asked after, not awaited here: keys a person types as the app opens go on to
        # where they lead meanwhile (tests/integration/test_key_order.py).
        self.run_worker(self._learn_offline(), group="offline", exit_on_error=False)

    async def _learn_offline(self) -> None:
        """The service downloads: its HF_HUB_OFFLINE, not ours, says whether d would fail."""
        try:
            self.chat.offline = await self.runtime.hub_offline()
        except Exception:  # noqa: BLE001 - a service that cannot say: the usual words
            pass
        self.offline_known = True

    async def refresh_sidebar(self) -> None:
        """List the conversations (or the search's hits). A turn's tail calls this as the
        person quits: the widgets may be gone by then, and there is nothing to list."""
        try:
            query = self.query_one("#search", Input).value
            if query.strip():
                hits = await self.runtime.search(searched_as_typed(query))
                self.query_one(Sidebar).show_hits(hits, query)
            else:
                conversations = await self.runtime.list_conversations()
                self.query_one(Sidebar).show_conversations(conversations, self.conversation_id)
        except NoMatches:
            return
        self.history_listed = True

    @contextmanager
    def store_errors(self, title: str) -> Iterator[None]:
        """A store failure in the block (a full disk, a damaged page) becomes a notice with
        the store's own sentence; the block's remaining steps are skipped, the app stays."""
        try:
            yield
        except StoreError as exc:
            self.notify(exc.message, title=title, severity="error", timeout=10)

    # -- actions -------------------------------------------------------------------------
    async def action_new_chat(self) -> None:
        if self.busy or self._sending:  # after the reply, in the order the keys came
            if self.busy:
                self.notify("A new chat starts when this reply is done.", timeout=3)
            self.outbox.append(NEW_CHAT)
            self._start_outbox()
            return
        await self._new_chat()

    async def _new_chat(self) -> None:
        self.conversation_id = None
        self.composer.stop_editing()
        self.composer.focus()  # first: removing a focused message would move focus elsewhere
        self.query_one(AttachmentBar).clear()
        # a search left on (a hit opened with Enter) would keep the new chat out of the list
        self.query_one("#search", Input).value = ""
        await self.chat.show_empty()
        self.query_one(StatusBar).context_used = 0
        await self._start_from_preset()

    async def _start_from_preset(self) -> None:
        """A new chat starts from the model's own preset (the service's, issue 31)."""
        try:
            applied = await self.runtime.apply_preset()
        except OSError:
            return  # an unreadable config folder: the settings as they are
        if applied is not None and applied[1] and not self.busy:  # its context size
            self.run_worker(self.runtime.reload_model(), group="model", exclusive=True)

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_focus_composer(self) -> None:
        self.composer.focus()

    def action_focus_messages(self) -> None:
        views = self.chat.views
        if views:
            views[-1].focus()
            views[-1].scroll_visible(animate=False)

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one(Sidebar)
        sidebar.display = not sidebar.display

    def action_toggle_workers(self) -> None:
        self.query_one(WorkerPane).toggle()

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen, help_groups

        self.app.push_screen(HelpScreen(help_groups(type(self.app), type(self))))

    def action_settings(self) -> None:
        from tui.screens.settings import SettingsScreen

        def _done(reload: bool | None) -> None:
            if reload and self.turn is None:
                self.run_worker(self.runtime.reload_model(), group="model", exclusive=True)

        self.app.push_screen(SettingsScreen(), _done)

    def action_pick_model(self) -> None:
        from tui.screens.model_picker import ModelPickerScreen

        def _picked(choice) -> None:
            if choice is not None:
                self.app.use_model(choice)  # type: ignore[attr-defined]

        self.app.push_screen(ModelPickerScreen(), _picked)

    # -- compare (issue 31, item 5): the screen and the core live in compare modules --------
    def action_compare(self) -> None:
        """Compare with…: the composer's message to the chat model and a picked second one."""
        from tui.screens.compare import start_compare

        start_compare(self)

    @work(group="compare")
    async def _compared(self, outcome) -> None:  # noqa: ANN001  (tui.screens.compare.CompareOutcome)
        from tui.screens.compare import take_outcome

        await take_outcome(self, outcome)

    def action_reload_model(self) -> None:
        if self.busy:
            self.notify(BUSY)
            return
        self.run_worker(self.runtime.reload_model(), group="model", exclusive=True)

    def action_stop(self) -> None:
        if cancel_attach(self):
            return  # Esc stops the files being read first; the next Esc stops a reply
        if self.queued_texts():  # queued messages go back to the composer, ahead of new text
            queued = "\n\n".join(self.queued_texts())
            self.outbox.clear()
            rest = self.composer.text
            self.composer.restore(queued + ("\n\n" + rest if rest.strip() else ""))
            self.notify("Stopped; the queued messages are back in the composer.", timeout=4)
            self.show_composer_state()
        if self.turn is not None:
            self.turn.cancel()
        elif self._starting or self.live.attaching:
            self.live.stop_asked = True  # its reply is on its way here: stopped as it comes
        elif self.composer.editing_id is not None:
            self.composer.stop_editing()
            self.notify("Edit cancelled.", timeout=2)
        else:
            self.composer.focus()

    @work(group="export")
    async def action_export(self) -> None:
        if self.conversation_id is None:
            self.notify("Nothing to export yet: send a message first.")
            return
        try:
            path = await self.runtime.export_conversation(self.conversation_id)
        except Exception as exc:
            self.notify(f"Could not export: {exc}", severity="error")
            return
        self.notify(f"Exported to {path}", title="Export", timeout=6)

    # -- conversations ---------------------------------------------------------------------
    async def open_conversation(self, conversation_id: str, focus_message: str | None = None,
                                *, follow: bool = True) -> None:
        """Show the newest page, or with `focus_message` (a search hit) the page around it,
        scrolled to it and focused; scrolling then loads older or newer pages. With
        `follow`, a reply still streaming there in the engine service streams on here."""
        self.conversation_id = conversation_id
        runtime = self.runtime
        messages: list = []
        older, newer = None, False
        if focus_message is not None:
            messages, older, newer = await runtime.messages_around(conversation_id, focus_message, PAGE)
        if not messages:  # no hit, or it was deleted since the search
            older, newer = None, False
            messages = await runtime.messages(conversation_id, PAGE)
        branches = await runtime.branch_positions([m.id for m in messages])
        await self.chat.show_messages(messages, branches, has_older=older, has_newer=newer)
        await place_images(self.chat, await runtime.images(conversation_id), messages,
                           has_older=self.chat.has_older, has_newer=newer)
        await self.query_one(AttachmentBar).show(await runtime.attachments(conversation_id))
        newest = await runtime.messages(conversation_id, 2) if newer else messages
        self.query_one(StatusBar).context_used = context_use(newest)
        target = next((v for v in self.chat.views if v.message_id == focus_message), None)
        if target is not None:
            target.focus()
            self.call_after_refresh(self.chat.scroll_to_center, target, animate=False)
        if follow and not newer:
            await self.live.follow(conversation_id)

    # -- a reply streaming in the engine service (issue 30): tui.screens.live_follow --------
    def on_live_reply(self, summary: dict) -> None:
        """The service runs a reply in some conversation (tui.app pushes it here)."""
        self.live.on_live_reply(summary)

    async def turn_over(self) -> None:
        """Wait until no reply streams on this screen."""
        await self._no_turn.wait()

    async def at_newest(self) -> None:
        """Before a new message is added: leave an older page for the newest one."""
        if self.chat.has_newer and self.conversation_id is not None:
            await self.open_conversation(self.conversation_id)

    async def on_sidebar_opened(self, event: Sidebar.Opened) -> None:
        if self.busy and not await self.live.stop_following():
            self.notify(BUSY)
            return
        self.composer.stop_editing()
        try:
            await self.open_conversation(event.conversation_id, event.message_id)
        except StoreError as exc:  # a damaged page met after the start-up check: say so
            self.notify(exc.message, title="Cannot open this conversation", severity="error",
                        timeout=15)
            return
        if event.message_id is None:
            self.composer.focus()
        self.app.use_conversation_model(event.conversation_id)  # type: ignore[attr-defined]

    async def on_sidebar_search_changed(self, event: Sidebar.SearchChanged) -> None:
        self.run_search(event.query)

    @work(exclusive=True, group="search")
    async def run_search(self, query: str) -> None:
        sidebar = self.query_one(Sidebar)
        with self.store_errors("Search"):
            if not query.strip():
                sidebar.show_conversations(await self.runtime.list_conversations(),
                                           self.conversation_id)
                return
            sidebar.show_hits(await self.runtime.search(searched_as_typed(query)), query)

    def on_sidebar_requested(self, event: Sidebar.Requested) -> None:
        cid = event.conversation_id
        if event.action == "rename":
            self.app.push_screen(PromptScreen("New title for this conversation:"),
                                 lambda title: self._rename(cid, title) if title else None)
        elif event.action == "delete":
            if self.turn is not None and self.turn.conversation_id == cid:
                self.notify(BUSY)
                return
            self.app.push_screen(
                ConfirmScreen("Delete this conversation and all its messages? This cannot be undone."),
                lambda yes: self._delete_conversation(cid) if yes else None)

    @work(group="conversation-edit")
    async def _rename(self, cid: str, title: str) -> None:
        with self.store_errors("Not renamed"):
            await self.runtime.rename_conversation(cid, title)
            await self.refresh_sidebar()

    @work(group="conversation-edit")
    async def _delete_conversation(self, cid: str) -> None:
        with self.store_errors("Not deleted"):
            await self.runtime.delete_conversation(cid)
            if cid == self.conversation_id:
                await self.action_new_chat()
            await self.refresh_sidebar()
            self.notify("Conversation deleted.", timeout=3)

    async def on_chat_view_load_older(self, event: ChatView.LoadOlder) -> None:
        if self.conversation_id is None:
            return
        older = await self.runtime.messages(self.conversation_id, PAGE, before=event.before)
        branches = await self.runtime.branch_positions([m.id for m in older])
        await self.chat.prepend_messages(older, branches)

    async def on_chat_view_load_newer(self, event: ChatView.LoadNewer) -> None:
        if self.conversation_id is None:
            return
        newer = await self.runtime.messages_after(self.conversation_id, event.after, PAGE + 1)
        branches = await self.runtime.branch_positions([m.id for m in newer[:PAGE]])
        await self.chat.append_messages(newer[:PAGE], branches, has_newer=len(newer) > PAGE)

    # -- message actions: carried out in tui.screens.message_actions -----------------------
    async def on_message_view_action(self, event: MessageView.Action) -> None:
        if event.action == "load_older":
            self.chat.request_older()
            return
        if self.busy:
            self.notify(BUSY)
            return
        await self.message_actions.act(event.view, event.action)

    async def _approve_tool(self, call: ToolCall) -> str:
        """Ask before a tool runs (tui.screens.tool_approval.ask)."""
        from tui.screens.tool_approval import ask

        return await ask(self, call)

    # -- fenced Python blocks: F8 and F9, carried out in tui.screens.code_runs -------------
    def action_run_code(self) -> None:
        if self.busy:
            self.notify(BUSY)
            return
        self.code_runs.run_focused()

    def action_fix_code(self) -> None:
        self.code_runs.fix()

    # -- sending -----------------------------------------------------------------------------
    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        if isinstance(event.text_area, Composer):
            slash_run.composer_changed(self, event.text_area.text)  # the hint line

    async def on_composer_submitted(self, event: Composer.Submitted) -> None:
        text = event.text
        command = slash.parse(text)
        if self.busy and (command is not None or event.composer.editing_id is not None):
            self.notify("Wait for the reply to finish, or press Esc to stop it.")
            return  # a plain message queues (send); a command or an edit waits in the composer
        dropped = dropped_image_paths(text) if command is None else []
        if dropped:  # a file dragged onto the terminal: its path, pasted (/home/... too)
            command = slash.SlashCommand("/attach", " ".join(shlex.quote(p) for p in dropped))
        refused = slash.unknown_command(text) if command is None else None
        if refused:
            self.notify(refused, severity="warning", timeout=6)
            return
        if command is None and not self.runtime.check_mentions(self.conversation_id, text).ok:
            return  # the attachment bar already says which @doc(...) matches nothing
        event.composer.load_text("")
        self.query_one("#slash-hint").display = False
        if command is not None:
            await self.run_slash(command)
            return
        if text.strip().startswith("//"):
            text = text.strip()[1:]
        editing = event.composer.editing_id
        if editing is not None:
            event.composer.stop_editing()
            self.edit_and_resend(editing, text)
        else:
            self.send(text)

    async def run_slash(self, command: slash.SlashCommand) -> None:
        await slash_run.run_slash(self, command)  # tui.screens.slash_run

    def send(self, text: str) -> None:
        """Send a message now, or after the replies before it when some are on their way:
        messages typed ahead go in the order they were sent, each as its own turn."""
        self.outbox.append(text)
        self._start_outbox()
        self.show_composer_state()

    def _start_outbox(self) -> None:
        if not self._sending:
            self._sending = True
            self._send_outbox()

    @work(group="send")
    async def _send_outbox(self) -> None:
        try:
            while self.outbox:
                await self._no_turn.wait()  # a regenerated or edited reply finishes first
                if not self.outbox:  # Esc took the queue back meanwhile
                    break
                item = self.outbox.popleft()
                if item is NEW_CHAT:
                    await self._new_chat()
                    continue
                self._starting = True
                self.live.stop_asked = False
                self.show_composer_state()
                try:
                    if not await self._send_one(str(item)):
                        break
                finally:
                    self._starting = False
        finally:
            self._sending = False
            self._starting = False
            self.show_composer_state()
            self.refresh_bindings()

    def show_composer_state(self) -> None:
        """The composer says what Enter does while the app is busy (turn_stream)."""
        show_composer_state(self)

    async def _send_one(self, text: str) -> bool:
        """One queued message as its own turn; False (text back in the composer) if the
        store refused it."""
        await self.at_newest()
        # Shown at once: the service's client waits for a loading model before its turn
        # starts, and the message had left the composer for nowhere meanwhile (issue 48).
        user_view = await self.chat.add_message(MessageView("user", text))
        try:
            turn = await self.runtime.start_turn(self.conversation_id, text)
        except Exception as exc:  # the store refused: give the text back, lose nothing
            await user_view.remove()
            queued = [text, *self.queued_texts()]
            self.outbox.clear()
            rest = self.composer.text
            self.composer.restore("\n\n".join(queued) + ("\n\n" + rest if rest.strip() else ""))
            self.notify(f"Could not save your message: {exc}", severity="error")
            return False
        new_conversation = self.conversation_id != turn.conversation_id
        self.conversation_id = turn.conversation_id
        if turn.rollover is not None:  # the context was summarised into a fresh session
            await self.chat.mount(MemoryMarker(turn.rollover), before=user_view)
        user_view.message_id = turn.user_message_id
        if new_conversation:
            await self.refresh_sidebar()
        await self.run_turn(turn, user_view)
        return True

    @work(exclusive=True, group="turn")
    async def edit_and_resend(self, message_id: str, text: str) -> None:
        try:
            turn = await self.runtime.edit_and_resend(self.conversation_id, message_id, text)
        except Exception as exc:
            self.composer.restore(text)
            self.notify(f"Could not save the edit: {exc}", severity="error")
            return
        old = next((v for v in self.chat.views if v.message_id == message_id), None)
        if old is not None:
            await self.message_actions.drop_from(old)
        user_view = await self.chat.add_message(MessageView("user", text, message_id=turn.user_message_id))
        await self.run_turn(turn, user_view)

    async def run_turn(self, turn: Turn, user_view: MessageView | None,
                       branch: tuple[int, int] | None = None,
                       reply: MessageView | None = None) -> None:
        """Stream a turn into a new reply view (or `reply`, a cut reply continued in place);
        the shared tail of send/regenerate/edit/continue. `branch` labels a regenerated
        reply while it streams (the store confirms at the end). Drawing: turn_stream."""
        self.turn = turn
        self._no_turn.clear()
        self._starting = False  # busy now because the turn streams
        turn.approve = self._approve_tool
        self.live.streaming(turn)
        self.refresh_bindings()
        self.show_composer_state()
        chat = self.chat
        chat.has_newer = False  # the reply is the branch's newest message, whatever page it is on
        if reply is None:
            reply = await chat.add_message(MessageView("assistant", branch=branch))
        chat.anchor()
        try:
            bar = self.query_one(StatusBar)
            counted = bar.count_from(user_view.content if user_view is not None else "")
            reply = await draw_events(turn, reply, chat, bar, self.runtime,
                                      self.conversation_id, counted)
        finally:
            await reply.finish()
            if turn.sources:
                await reply.mount(SourcesLine(turn.sources))
            self.turn = None
            self._no_turn.set()
            self.refresh_bindings()
            self.show_composer_state()
            reply.message_id = turn.assistant_message_id
            chat.scroll_end(animate=False)
        ids = [v.message_id for v in (user_view, reply) if v is not None and v.message_id]
        positions = await self.runtime.branch_positions(ids)
        for v in (user_view, reply):
            if v is not None and v.message_id in positions:
                v.set_branch(positions[v.message_id])
        await self.refresh_sidebar()
