"""The scrolling list of messages of the open conversation."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.widgets import Static

from core.store import Message
from tui.widgets.message_view import MessageView, format_stats_dict

EMPTY_HINT = (
    "Start typing below. Enter sends, Ctrl+J adds a new line, Ctrl+N starts a new chat."
)


class ChatView(VerticalScroll):
    """Shows messages; keeps itself scrolled to the end while a reply streams."""

    can_focus = True

    def on_mount(self) -> None:
        self.show_empty()

    def show_empty(self) -> None:
        self.remove_children()
        self.mount(Static(EMPTY_HINT, classes="empty-hint"))

    async def show_messages(self, messages: list[Message]) -> None:
        await self.remove_children()
        if not messages:
            await self.mount(Static(EMPTY_HINT, classes="empty-hint"))
            return
        views = [
            MessageView(m.role, m.content, reasoning=m.reasoning or "",
                        stats=format_stats_dict(m.usage), status=m.status,
                        error=m.error or ("This reply failed." if m.status == "error" else None))
            for m in messages
        ]
        await self.mount_all(views)
        self.scroll_end(animate=False)

    async def add_message(self, view: MessageView) -> MessageView:
        for hint in self.query(".empty-hint"):
            await hint.remove()
        await self.mount(view)
        self.scroll_end(animate=False)
        return view
