"""The main screen: sidebar, chat view, composer, status line, footer."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input

from core.events import Done, Error, ReasoningDelta, TextDelta, ToolCall, Usage
from core.runtime import ModelState, Turn
from tui.widgets.chat_view import ChatView
from tui.widgets.composer import Composer
from tui.widgets.message_view import MessageView
from tui.widgets.sidebar import Sidebar
from tui.widgets.status_bar import StatusBar


class MainScreen(Screen):
    """Everything a chat needs on one screen."""

    BINDINGS = [
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+f", "search", "Search"),
        Binding("escape", "stop", "Stop", show=True),
        Binding("ctrl+b", "toggle_sidebar", "Sidebar"),
        Binding("ctrl+l", "focus_composer", "Composer", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.conversation_id: str | None = None
        self.turn: Turn | None = None

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status-bar")
        with Horizontal(id="body"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat-column"):
                yield ChatView(id="chat")
                yield Composer(id="composer")
        yield Footer()

    @property
    def runtime(self):
        return self.app.runtime  # type: ignore[attr-defined]

    def on_mount(self) -> None:
        self.query_one(Composer).focus()

    # -- runtime callbacks -------------------------------------------------------------
    def on_model_state(self, state: ModelState) -> None:
        bar = self.query_one(StatusBar)
        bar.model_label = state.label
        bar.model_state = state.state
        bar.context_size = state.context_size
        if state.state == "failed" and state.error:
            self.notify(state.error, title="Model", severity="error", timeout=8)

    async def refresh_sidebar(self) -> None:
        conversations = await self.runtime.list_conversations()
        self.query_one(Sidebar).show_conversations(conversations, self.conversation_id)

    # -- actions -------------------------------------------------------------------------
    def action_new_chat(self) -> None:
        if self.turn is not None:
            self.notify("A reply is still streaming; press Esc to stop it first.")
            return
        self.conversation_id = None
        self.query_one(ChatView).show_empty()
        self.query_one(StatusBar).context_used = 0
        self.query_one(Composer).focus()

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_focus_composer(self) -> None:
        self.query_one(Composer).focus()

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one(Sidebar)
        sidebar.display = not sidebar.display

    def action_stop(self) -> None:
        if self.turn is not None:
            self.turn.cancel()
        elif self.focused is not None and self.focused.id == "search":
            self.query_one(Composer).focus()

    # -- messages from widgets -------------------------------------------------------------
    async def on_sidebar_opened(self, event: Sidebar.Opened) -> None:
        if self.turn is not None:
            self.notify("A reply is still streaming; press Esc to stop it first.")
            return
        self.conversation_id = event.conversation_id
        messages = await self.runtime.messages(event.conversation_id)
        await self.query_one(ChatView).show_messages(messages)
        used = 0
        for m in messages:
            if m.usage:
                used = int(m.usage.get("prompt_tokens", 0)) + int(m.usage.get("completion_tokens", 0))
        self.query_one(StatusBar).context_used = used
        self.query_one(Composer).focus()

    async def on_sidebar_search_changed(self, event: Sidebar.SearchChanged) -> None:
        self.run_search(event.query)

    @work(exclusive=True, group="search")
    async def run_search(self, query: str) -> None:
        sidebar = self.query_one(Sidebar)
        if not query.strip():
            await self.refresh_sidebar()
            return
        hits = await self.runtime.search(query)
        sidebar.show_hits(hits)

    async def on_composer_submitted(self, event: Composer.Submitted) -> None:
        if self.turn is not None:
            self.notify("Wait for the reply to finish, or press Esc to stop it.")
            return
        text = event.text
        event.composer.load_text("")
        self.send(text)

    @work(exclusive=True, group="turn")
    async def send(self, text: str) -> None:
        chat = self.query_one(ChatView)
        composer = self.query_one(Composer)
        try:
            turn = await self.runtime.start_turn(self.conversation_id, text)
        except Exception as exc:  # the store refused: give the text back, lose nothing
            composer.restore(text)
            self.notify(f"Could not save your message: {exc}", severity="error")
            return
        self.turn = turn
        new_conversation = self.conversation_id != turn.conversation_id
        self.conversation_id = turn.conversation_id
        await chat.add_message(MessageView("user", text))
        reply = await chat.add_message(MessageView("assistant"))
        if new_conversation:
            await self.refresh_sidebar()
        bar = self.query_one(StatusBar)
        try:
            async for event in turn.events():
                if isinstance(event, TextDelta):
                    await reply.append_text(event.text)
                    chat.scroll_end(animate=False)
                elif isinstance(event, ReasoningDelta):
                    await reply.append_reasoning(event.text)
                elif isinstance(event, ToolCall):
                    await reply.append_text(f"\n\n`tool call: {event.name}({event.arguments})`\n")
                elif isinstance(event, Usage):
                    reply.set_usage(event)
                    bar.context_used = event.prompt_tokens + event.completion_tokens
                elif isinstance(event, Error):
                    reply.show_error(event)
                elif isinstance(event, Done):
                    break
        finally:
            await reply.finish()
            self.turn = None
            chat.scroll_end(animate=False)
            await self.refresh_sidebar()
