"""What the keys on a focused message do: regenerate, edit, walk branches, delete, and
continue a reply cut at its length limit (in place: the same view streams on).

MessageView posts a MessageView.Action; the chat screen receives it (the handler must live
on the screen), checks that no reply streams, and hands it here. This class carries the
action out through the runtime and redraws the chat; a regenerated reply streams through
the screen's own `run_turn`, so it is the screen's turn like any other.
"""

from __future__ import annotations

from collections.abc import Coroutine
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from tui.screens.dialogs import ConfirmScreen
from tui.widgets.chat_view import ChatView
from tui.widgets.composer import Composer
from tui.widgets.message_view import MessageView

if TYPE_CHECKING:
    from core.runtime import Turn


class MessageScreen(Protocol):
    """What message actions need from the screen that shows the chat (MainScreen)."""

    conversation_id: str | None

    @property
    def app(self) -> Any: ...
    @property
    def runtime(self) -> Any: ...
    @property
    def chat(self) -> ChatView: ...
    @property
    def composer(self) -> Composer: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], *, group: str, exclusive: bool) -> Any: ...
    def notify(self, message: str, **options: Any) -> None: ...
    def store_errors(self, title: str) -> AbstractContextManager[None]: ...
    async def open_conversation(self, conversation_id: str, focus_message: str | None = None,
                                *, follow: bool = True) -> None: ...
    async def run_turn(self, turn: Turn, user_view: MessageView | None,
                       branch: tuple[int, int] | None = None,
                       reply: MessageView | None = None) -> None: ...


class MessageActions:
    """The chat screen's message actions (its busy gate already passed)."""

    def __init__(self, screen: MessageScreen) -> None:
        self.screen = screen

    async def act(self, view: MessageView, action: str) -> None:
        """Carry out `action` (MessageView.Action's name) on `view`."""
        screen = self.screen
        if view.message_id is None or screen.conversation_id is None:
            screen.notify("This message is not saved yet.")
            return
        if action == "regenerate":
            screen.run_worker(self._regenerate(view), group="turn", exclusive=True)
        elif action == "continue":
            if view.role != "assistant" or view.status != "cut":
                screen.notify("Only a reply cut at its length limit can be continued; press r "
                              "to regenerate it.", timeout=3)
                return
            screen.run_worker(self._continue(view), group="turn", exclusive=True)
        elif action == "edit":
            if view.role != "user":
                screen.notify("Only your own messages can be edited; press r to regenerate a reply.")
                return
            screen.composer.start_editing(view.message_id, view.content)
        elif action in ("prev_branch", "next_branch"):
            step = -1 if action == "prev_branch" else 1
            with screen.store_errors("Branch not switched"):
                if not await screen.runtime.step_branch(view.message_id, step):
                    screen.notify("No other branch that way." if view.branch else
                                  "This message has no other branches (edit or regenerate to "
                                  "make one).", timeout=3)
                    return
                index = screen.chat.views.index(view)
                await screen.open_conversation(screen.conversation_id)
                views = screen.chat.views
                if views:
                    views[min(index, len(views) - 1)].focus()
        elif action == "delete":
            mid = view.message_id
            screen.app.push_screen(
                ConfirmScreen("Delete this message and every reply below it?"),
                lambda yes: self._delete_later(mid) if yes else None)

    def _delete_later(self, message_id: str) -> None:
        self.screen.run_worker(self._delete(message_id), group="message-edit", exclusive=False)

    async def _delete(self, message_id: str) -> None:
        screen = self.screen
        with screen.store_errors("Not deleted"):
            await screen.runtime.delete_message(message_id)
            if screen.conversation_id is not None:
                await screen.open_conversation(screen.conversation_id)
            screen.notify("Message deleted.", timeout=3)

    async def drop_from(self, view: MessageView) -> None:
        """Remove `view` and every message below it (they belong to another branch now)."""
        views = self.screen.chat.views
        for v in views[views.index(view):]:
            await v.remove()

    async def _regenerate(self, view: MessageView) -> None:
        screen = self.screen
        try:
            turn = await screen.runtime.regenerate(screen.conversation_id, view.message_id)
        except Exception as exc:
            screen.notify(f"Cannot regenerate: {exc}", severity="error")
            return
        views = screen.chat.views
        user_view = next((v for v in views if v.message_id == turn.user_message_id), None)
        count = 1
        if user_view is not None and views.index(user_view) + 1 < len(views):
            old_reply = views[views.index(user_view) + 1]
            count = old_reply.branch[1] if old_reply.branch else 1
            await self.drop_from(old_reply)
        await screen.run_turn(turn, user_view, branch=(count + 1, count + 1))

    async def _continue(self, view: MessageView) -> None:
        """The cut reply goes on from where it stopped, in the same view and message."""
        screen = self.screen
        try:
            turn = await screen.runtime.continue_reply(screen.conversation_id, view.message_id)
        except Exception as exc:
            screen.notify(f"Cannot continue: {exc}", severity="error")
            return
        view.begin_continue()
        user_view = next((v for v in screen.chat.views if v.message_id == turn.user_message_id),
                         None)
        await screen.run_turn(turn, user_view, reply=view)
