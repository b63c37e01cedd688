"""Keys and pastes are handled one at a time, in the order they arrived.

Textual's App runs a priority binding the moment a key reaches the app, and forwards every
other key into the focused widget's message queue; a non-priority binding (the widget's own
backspace and arrows, the screen's Ctrl+F) runs only once the key has bubbled back up to
the app through each ancestor's queue. When keys arrive in a burst (SSH on a slow link, a
paste without bracketed paste, `tmux send-keys 'text' Enter`) that reorders them: Enter
sent a half-typed message, a backspace deleted the character typed after it, and keys typed
after Ctrl+F or Ctrl+P went to the widget that had focus before.

`InputOrder` takes the app's raw keys and pastes into one FIFO served by one task. A key
that may act beyond the focused text box (anything bound, anything not printable, a paste)
waits until the keys forwarded before it are fully handled, and the next key waits until
its effects (the messages it posted, a focus change, a pushed screen) are in place.
Printable keys bound to nothing and typed into a focused text box are forwarded without
waiting: they cannot move focus, and the box's own queue keeps them in order.

Pastes in a terminal without bracketed paste arrive as typed keys, each line break an
Enter. An Enter with typed text right before it and right after it in the same burst (keys
under BURST_GAP_S apart: no person types that fast) is a line break inside pasted text, so
a widget that names a `burst_newline_key` gets that key instead, and the paste stays in it
as text. An Enter that ends a burst, or starts one, is a real Enter.
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections import deque
from collections.abc import Awaitable, Callable

from textual import events
from textual.app import App
from textual.message_pump import MessagePump
from textual.widget import Widget
from textual.widgets import Input, TextArea

log = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 2.0
"""A handler that awaits longer than this (it should not: long work runs in workers) lets
the next key through rather than freezing the keyboard, unless that key is text: typed
text waits for the settle however long it takes (on a loaded box closing a dialog took
over 2 s, and the text typed after its Esc went into the dialog and was lost with it).
Ctrl+Q (the app's priority bindings) is never held behind such a wait."""

BURST_GAP_S = 0.015
"""Keys closer than this came from one read of the terminal (a paste, a script, a bunched
SSH packet); a person's keystrokes are tens of milliseconds apart. 4 ms let a pasted line
break through as Enter on a loaded 2-core box (the paste arrives in several reads)."""


async def _barrier(node: MessagePump) -> None:
    """Return once `node` has handled every message queued on it before this call, or has
    stopped (a dismissed dialog's widgets close with the barrier still queued)."""
    reached = asyncio.Event()
    if not node.call_later(reached.set):
        return
    stopped = node._task
    if stopped is None or stopped.done():
        await reached.wait()
        return
    waiter = asyncio.ensure_future(reached.wait())
    await asyncio.wait((waiter, stopped), return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


def _quietly(task: asyncio.Task[None]) -> None:
    """A settle that outlived its timeout: its end is awaited by nobody but held text."""
    if not task.cancelled():
        task.exception()


def is_text_char(char: str | None) -> bool:
    """A character that belongs in typed text: printable, or one str.isprintable() refuses
    though text needs it (the joiner inside an emoji sequence, a no-break space, a
    direction mark); never a control character."""
    if char is None or len(char) != 1:
        return False
    return char.isprintable() or unicodedata.category(char) in ("Cf", "Zs", "Zl", "Zp", "Co")


def _is_text(event: events.Event | None) -> bool:
    return isinstance(event, events.Paste) or (
        isinstance(event, events.Key) and is_text_char(event.character))


class InputOrder:
    """The one path raw keys and pastes take into the app (see the module docstring)."""

    def __init__(self, app: App, deliver: Callable[[events.Event], Awaitable[None]]) -> None:
        self.app = app
        self._deliver = deliver  # Textual's own App.on_event: bindings, then forward
        self._pending: deque[events.Event] = deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._typing_into: Widget | None = None  # got keys without waiting, not yet settled
        self._busy = False
        self._last_text_at: float | None = None  # when text last went into a text box
        self._unsettled: asyncio.Future[None] | None = None  # a settle past its timeout
        self._holding_text = False  # text waits on that settle (put() says so)
        self.timeouts = 0  # settles that ran past SETTLE_TIMEOUT_S (logged; tests read it)

    async def feed(self, event: events.Key | events.Paste) -> None:
        """Take a raw key or paste from the app's queue. A printable key into the focused
        text box, with nothing waiting before it, goes in at once (typing into the
        composer while a reply streams pays no extra hop); any other waits its turn."""
        if not self._pending and not self._busy and not self._unsettled_now:
            typed = self._typed_into(event)
            if typed is not None and self._typing_into in (None, typed):
                self._typing_into = typed
                self._last_text_at = event.time
                await self._deliver(event)
                return
        self.put(event)

    @property
    def _unsettled_now(self) -> bool:
        return self._unsettled is not None and not self._unsettled.done()

    def put(self, event: events.Key | events.Paste) -> None:
        if self._task is None:  # made here, inside the app's context (active_app is set)
            self._task = asyncio.create_task(self._run(), name="llmdeck-input-order")
        if self._holding_text and self._app_priority(event):  # Ctrl+Q is never held
            asyncio.create_task(self._deliver(event), name="llmdeck-priority-key")
            return
        self._pending.append(event)
        self._arrived.set()

    def _app_priority(self, event: events.Key | events.Paste) -> bool:
        """The app's own priority bindings (quit): they act at once in Textual too."""
        if not isinstance(event, events.Key):
            return False
        bindings = self.app._bindings.key_to_bindings.get(event.key, ())
        return any(binding.priority for binding in bindings)

    @property
    def idle(self) -> bool:
        """No key waits and none is being handled (tests wait on this)."""
        typing = self._typing_into
        return not self._pending and not self._busy and (
            typing is None or typing._message_queue.empty())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            event = self._pending.popleft()
            self._busy = True
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # as an exception in a handler would: the app shows it
                self.app._handle_exception(exc)
                return
            finally:
                self._busy = False

    async def _handle(self, event: events.Event) -> None:
        if self._unsettled_now and _is_text(event):
            self._holding_text = True  # typed text never goes where the last key had not led
            try:
                await asyncio.shield(self._unsettled)
            finally:
                self._holding_text = False
        typed = self._typed_into(event)
        if typed is not None and self._typing_into in (None, typed):
            self._typing_into = typed
            self._last_text_at = event.time
            await self._deliver(event)
            return
        await self._settle()  # what came before is fully handled
        line_break = False
        if isinstance(event, events.Key) and event.key == "enter":
            event, line_break = await self._pasted_line_break(event)
        self._last_text_at = event.time if _is_text(event) or line_break else None
        await self._deliver(event)
        await self._settle()  # and so is this key, wherever it moved focus

    async def _pasted_line_break(self, enter: events.Key) -> tuple[events.Key, bool]:
        """(`enter`, False), or (the focused widget's newline key, True) when the Enter sits
        inside a burst of text (a paste without bracketed paste)."""
        newline = getattr(self.app.focused, "burst_newline_key", None)
        if newline is None or self._last_text_at is None \
                or enter.time - self._last_text_at > BURST_GAP_S:
            return enter, False
        if not self._pending:  # the rest of the burst may still be on its way from the driver
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), BURST_GAP_S)
            except TimeoutError:
                pass
        after = self._pending[0] if self._pending else None
        if after is None or not _is_text(after) or after.time - enter.time > BURST_GAP_S:
            return enter, False
        line_break = events.Key(newline, "\n")
        line_break.time = enter.time
        return line_break, True

    def _typed_into(self, event: events.Event) -> Widget | None:
        """The focused text box a printable, unbound key goes straight into, else None."""
        if not isinstance(event, events.Key) or not event.is_printable:
            return None
        try:
            focused = self.app.focused
            chain = self.app.screen._binding_chain
        except Exception:  # no screen (starting or closing): the slow path copes
            return None
        if not isinstance(focused, (TextArea, Input)) or getattr(focused, "read_only", False):
            return None
        for _node, bindings in chain:
            if event.key in bindings.key_to_bindings:
                return None
        return focused

    async def _settle(self) -> None:
        """Wait until the keys delivered so far, and what they set off, are handled. Past
        SETTLE_TIMEOUT_S the next key goes on, but the settle goes on too: text waits for it
        (_handle)."""
        settle = asyncio.ensure_future(self._settle_chain())
        done, _ = await asyncio.wait({settle}, timeout=SETTLE_TIMEOUT_S)
        if not done:
            settle.add_done_callback(_quietly)
            self.timeouts += 1
            self._unsettled = settle
            log.warning("a key handler ran past %.1f s (waiting on %s); taking the next key "
                        "unless it is text", SETTLE_TIMEOUT_S, self._waiting_on)
        elif settle.exception() is not None:
            raise settle.exception()  # type: ignore[misc]
        self._typing_into = None

    _waiting_on: MessagePump | None = None  # the node the settle waits on (for the log)

    async def _settle_chain(self) -> None:
        app = self.app
        if not app.screen_stack:
            return
        start = self._typing_into or app.focused or app.screen
        node: MessagePump | None = start
        while node is not None:  # the key bubbles widget -> ... -> screen -> app, in turn
            await self._barrier(node)
            node = node._parent
        # What the handlers set off: focus() and screen changes arrive through the app's
        # queue (call_later) and the new screen's compose; two rounds catch a callback
        # queued by the first.
        for _ in range(2):
            await self._barrier(app.screen)
            await self._barrier(app)
            if app.focused is not None:
                await self._barrier(app.focused)
        self._waiting_on = None

    async def _barrier(self, node: MessagePump) -> None:
        self._waiting_on = node
        await _barrier(node)
