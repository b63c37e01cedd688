"""Following a reply that streams in the engine service but was not started on this screen.

With the engine service (issue 30) a reply outlives the terminal that asked for it, and
another TUI may start one in the conversation shown here. This class decides when such a
reply is taken over, replays it into the chat through the screen's own `run_turn`, and
lets go of it again (the reply goes on in the service). The screen stays the coordinator:
it owns the turn, the chat and the workers; this class holds only the following state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from tui.widgets.chat_view import ChatView
from tui.widgets.message_view import MessageView

if TYPE_CHECKING:
    from core.runtime import Turn


class FollowingScreen(Protocol):
    """What following needs from the screen that shows the chat (MainScreen)."""

    conversation_id: str | None
    turn: Turn | None

    @property
    def busy(self) -> bool: ...
    @property
    def at_rest(self) -> bool: ...
    @property
    def runtime(self) -> Any: ...
    @property
    def chat(self) -> ChatView: ...
    @property
    def workers(self) -> Any: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], *, group: str, exclusive: bool) -> Any: ...
    async def open_conversation(self, conversation_id: str, focus_message: str | None = None,
                                *, follow: bool = True) -> None: ...
    async def run_turn(self, turn: Turn, user_view: MessageView | None,
                       branch: tuple[int, int] | None = None) -> None: ...
    async def turn_over(self) -> None: ...
    def refresh_bindings(self) -> None: ...
    def show_composer_state(self) -> None: ...


class LiveFollow:
    """The screen's following of replies running in the engine service."""

    def __init__(self, screen: FollowingScreen) -> None:
        self.screen = screen
        self.followed: frozenset[str | None] = frozenset()
        """Turn ids the screen streamed (started or followed): never followed again."""
        self.attaching = False  # a reply found in the service is being opened here
        self.following: str | None = None  # the turn id of a reply followed, not started, here
        # Esc came while a reply was about to stream here (its message on its way to the
        # service, or a reply found there being opened): it stops the reply as it arrives.
        self.stop_asked = False

    def streaming(self, turn: Turn) -> None:
        """`turn` streams on the screen now: never follow it again, and an Esc pressed
        before it arrived stops it."""
        self.followed = self.followed | {getattr(turn, "turn_id", None)}  # a service turn
        self.take_stop(turn)

    def on_live_reply(self, summary: dict) -> None:
        """The service runs a reply in some conversation (pushed as another client starts
        it, tui.service_runtime): when it is the open one and the screen shows no reply,
        follow it."""
        screen = self.screen
        turn_id = summary.get("turn")
        if (summary.get("conversation_id") == screen.conversation_id and turn_id not in self.followed
                and screen.at_rest and screen.conversation_id is not None):
            self.followed = self.followed | {turn_id}
            screen.run_worker(self.follow(screen.conversation_id), group="follow", exclusive=True)

    async def follow(self, conversation_id: str) -> None:
        """Stream the reply still running in the service for this conversation (started by
        another TUI, or by one whose terminal went away) into the chat, from its start:
        what the store showed of it so far is replaced by the replay. Esc stops it."""
        watch: Callable[[str], Awaitable[Turn | None]] | None = getattr(
            self.screen.runtime, "watch_reply", None)  # the engine service's runtime only
        if watch is None or self.screen.busy or self.attaching:
            return
        self.attaching = True  # the poll and the opening may both find it: one follows
        try:
            await self._follow(conversation_id, watch)
        finally:
            self.attaching = False
            self.stop_asked = False  # taken by the reply followed, or nothing to stop

    async def _follow(self, conversation_id: str,
                      watch: Callable[[str], Awaitable[Turn | None]]) -> None:
        screen = self.screen
        turn = await watch(conversation_id)
        if turn is None or screen.busy or screen.conversation_id != conversation_id:
            return
        self.followed = self.followed | {turn.turn_id}
        screen.turn = turn  # busy from here, and Esc stops it while the chat below is redrawn
        self.take_stop(turn)
        user_view = next((v for v in screen.chat.views if v.message_id == turn.user_message_id), None)
        if user_view is None:  # sent from another TUI after this one listed the chat
            try:
                await screen.open_conversation(conversation_id, follow=False)
            except BaseException:
                screen.turn = None
                raise
            user_view = next((v for v in screen.chat.views
                              if v.message_id == turn.user_message_id), None)
        views = screen.chat.views
        after = views[views.index(user_view) + 1:] if user_view in views else []
        for view in after:  # the stored part of the reply: the replay shows it all
            if view.role != "user":
                await view.remove()
        self.following = turn.turn_id
        screen.run_worker(screen.run_turn(turn, user_view), group="turn", exclusive=True)

    def take_stop(self, turn: Turn) -> None:
        """An Esc pressed before `turn` reached the screen stops it now."""
        if self.stop_asked:
            self.stop_asked = False
            turn.cancel()

    async def stop_following(self) -> bool:
        """Leave a reply the screen only follows (it goes on in the service, where any
        TUI can open it again); False when the reply streaming here was started here."""
        screen = self.screen
        if screen.turn is None or getattr(screen.turn, "turn_id", None) != self.following:
            return False
        followed, self.following = screen.turn, None
        screen.workers.cancel_group(screen, "turn")
        await screen.turn_over()
        if screen.turn is followed:  # cancelled before run_turn began
            screen.turn = None
            screen.refresh_bindings()
            screen.show_composer_state()
        return True
