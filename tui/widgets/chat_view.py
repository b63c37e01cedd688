"""The scrolling list of messages of the open conversation.

Only the newest page of a conversation is mounted; reaching the top (by scrolling, or by
moving the message cursor up past the first message) asks for the page before it, so a
long conversation opens as fast as a short one.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.await_complete import AwaitComplete
from textual.containers import VerticalScroll
from textual.message import Message as TextualMessage
from textual.widgets import Static

from core.wire.store import Message
from tui.widgets.attachments import MemoryMarker, marker_of
from tui.widgets.body_text import settled_size
from tui.widgets.message_view import MessageView, filled_context, format_stats_dict

START_HINT = (
    "Start typing below. Enter sends, Ctrl+J adds a new line, Ctrl+N starts a new chat.\n"
    "Shift+Tab (or ctrl+up) moves to the messages; F1 lists every key."
)
BUNDLED_HINT = "The bundled Gemma 3 270M is a small base model, fine for a first try only:"
GET_HINT = "Ctrl+O opens recommended models, and d there downloads and loads one."
EMPTY_HINT = f"{START_HINT}\n{BUNDLED_HINT}\n{GET_HINT}"


def empty_hint(offline: str | None = None, other_model: bool = False) -> str:
    """The empty chat's words; with the service's offline sentence (HF_HUB_OFFLINE) in place
    of the download line, which would only fail. `other_model`: the chat runs a model that
    is known not to be the bundled Gemma (a downloaded one, `--model PATH`), so the line
    about the Gemma is left out (it was said beside Qwen3 in the header)."""
    lines = [START_HINT]
    if not other_model:
        lines.append(BUNDLED_HINT if not offline else BUNDLED_HINT.removesuffix(":") + ".")
    lines.append(offline or GET_HINT)
    return "\n".join(lines)


PAGE = 50


def view_for(m: Message, branch: tuple[int, int] | None = None) -> MessageView:
    marker = marker_of(m)
    if marker is not None:  # a memory rollover: a line of its own, not a message
        return MemoryMarker(marker)  # type: ignore[return-value]
    error = m.error or ("This reply failed." if m.status == "error" else None)
    return MessageView(m.role, m.content, reasoning=m.reasoning or "",
                       stats=format_stats_dict(m.usage), status=m.status,
                       error=f"⚠ {error}\n  → Press r on this reply to try again." if error else None,
                       message_id=m.id, branch=branch, tool_results=m.tool_results,
                       tokens=int((m.usage or {}).get("completion_tokens") or 0),
                       filled=filled_context(m.usage))


class ChatView(VerticalScroll):
    """Shows messages; keeps itself scrolled to the end while a reply streams."""

    can_focus = False
    # Its scrollbars follow a new virtual size without another layout pass (see
    # message_body.settled_size): a streamed reply grows it every frame.
    virtual_size = settled_size()

    @dataclass
    class LoadOlder(TextualMessage):
        """Posted when the top is reached and older messages exist."""

        before: str

    @dataclass
    class LoadNewer(TextualMessage):
        """Posted when the bottom is reached of a page opened at an older message."""

        after: str

    def __init__(self, *, hint: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self._hint = hint  # False: blank until the screen knows what to show (show_empty)
        self.has_older = False
        self.has_newer = False  # True only while showing an older page (a search hit)
        self._asked = False
        self._offline: str | None = None
        self._other_model = False  # the model in use is known and is not the bundled one

    @property
    def offline(self) -> str | None:
        """The service's offline sentence (None: the Hub is on), as the empty chat says it."""
        return self._offline

    @offline.setter
    def offline(self, sentence: str | None) -> None:
        self._offline = sentence
        self._update_hints()

    def model_named(self, name: str, bundled: bool) -> None:
        """The model in use changed (its display name; "" while not known): the hint
        speaks of the bundled Gemma only when that is the model, or it is not known."""
        self._other_model = bool(name) and not bundled
        self._update_hints()

    def _hint_text(self) -> str:
        return empty_hint(self._offline, self._other_model)

    def _update_hints(self) -> None:
        for hint in self.query(".empty-hint").results(Static):
            hint.update(self._hint_text())

    def on_mount(self) -> None:
        if self._hint:
            self.show_empty()

    def show_empty(self) -> AwaitComplete:
        """Clear the view (awaitable: focus can move only once the old messages are gone)."""
        self.has_older = self.has_newer = False
        removing = self.remove_children()
        self.mount(Static(self._hint_text(), classes="empty-hint"))
        return removing

    @property
    def views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    async def show_messages(self, messages: list[Message],
                            branches: dict[str, tuple[int, int]] | None = None,
                            *, has_older: bool | None = None, has_newer: bool = False) -> None:
        """Show a page: by default the newest one; a page around a search hit says itself
        whether more lies above (`has_older`) and below (`has_newer`)."""
        branches = branches or {}
        await self.remove_children()
        self.has_older = len(messages) >= PAGE if has_older is None else has_older
        self.has_newer = has_newer
        self._asked = False
        if not messages:
            await self.mount(Static(self._hint_text(), classes="empty-hint"))
            return
        await self.mount_all([view_for(m, branches.get(m.id)) for m in messages])
        if not has_newer:  # a page around a hit is scrolled to the hit by its opener
            self.scroll_end(animate=False)

    async def prepend_messages(self, messages: list[Message],
                               branches: dict[str, tuple[int, int]] | None = None) -> int:
        """Mount an older page above the first message, keeping the view where it was."""
        branches = branches or {}
        self.has_older = len(messages) >= PAGE
        self._asked = False
        current = self.views
        if not messages or not current:
            return 0
        height_before = self.virtual_size.height
        await self.mount_all([view_for(m, branches.get(m.id)) for m in messages],
                             before=current[0])
        self.call_after_refresh(self._keep_place, height_before)
        return len(messages)

    def _keep_place(self, height_before: int) -> None:
        grown = self.virtual_size.height - height_before
        if grown > 0:
            self.scroll_to(y=self.scroll_y + grown, animate=False, immediate=True)

    def request_older(self) -> None:
        views = self.views
        if self.has_older and not self._asked and views and views[0].message_id:
            self._asked = True
            self.post_message(self.LoadOlder(views[0].message_id))

    async def append_messages(self, messages: list[Message],
                              branches: dict[str, tuple[int, int]] | None = None,
                              *, has_newer: bool = False) -> None:
        """Mount the next newer page below the last message (the view stays where it is)."""
        branches = branches or {}
        self.has_newer = has_newer
        self._asked = False
        if messages:
            await self.mount_all([view_for(m, branches.get(m.id)) for m in messages])

    def request_newer(self) -> None:
        views = self.views
        if self.has_newer and not self._asked and views and views[-1].message_id:
            self._asked = True
            self.post_message(self.LoadNewer(views[-1].message_id))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new <= 0 and old > 0:
            self.request_older()
        elif self.has_newer and new >= self.max_scroll_y and new > old:
            self.request_newer()

    async def add_message(self, view: MessageView) -> MessageView:
        for hint in self.query(".empty-hint"):
            await hint.remove()
        await self.mount(view)
        self.scroll_end(animate=False)
        return view
