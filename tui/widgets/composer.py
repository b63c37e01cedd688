"""The message composer: multi-line, Enter sends, Ctrl+J inserts a newline.

Tab completes a slash command while one is typed (see tui.slash), and a path after
/attach (see tui.widgets.attachments).

Shift+Enter rarely reaches an app over SSH (most terminals send the same byte as Enter),
so the newline key is Ctrl+J, which every terminal sends as a plain line feed; Alt+Enter
works too where the terminal passes it. Both are shown in the footer.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from tui.key_order import is_text_char
from tui.slash import complete
from tui.widgets.attachments import complete_attach

NEWLINE_KEYS = frozenset({"ctrl+j", "alt+enter", "shift+enter", "ctrl+enter"})


class Composer(TextArea):
    """Where the user writes; posts Composer.Submitted on Enter."""

    BINDINGS = [
        # Priority, so the TextArea's own Enter (a newline) never runs; keys typed before it
        # are all in the document by then (tui.key_order hands keys over in order).
        Binding("enter", "submit", "Send", show=True, priority=True),
        Binding("ctrl+j", "newline", "Newline", show=True, key_display="^j"),
    ]
    burst_newline_key = "ctrl+j"
    """What an Enter inside a burst of typed text (a paste without bracketed paste)
    becomes: a line break, so the paste stays here as text (tui.key_order)."""

    @dataclass
    class Submitted(Message):
        composer: Composer
        text: str

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.sent_history: list[str] = []
        self._history_pos: int | None = None
        self.editing_id: str | None = None  # set while editing a sent message

    def start_editing(self, message_id: str, text: str) -> None:
        """Load a sent message for editing; Enter resends it as a new branch."""
        self.editing_id = message_id
        self.border_title = "Editing: enter resends as a new branch · esc cancels"
        self.restore(text)
        self.focus()

    def stop_editing(self) -> None:
        if self.editing_id is not None:
            self.editing_id = None
            self.border_title = None
            self.load_text("")

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "tab" and self.text.startswith("/"):
            done = complete(self.text) or complete_attach(self.text)
            if done is not None:
                event.stop()
                event.prevent_default()
                self.load_text(done)
                self.move_cursor(self.document.end)
                return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.action_newline()
            return
        if event.key in ("up", "down") and self._browse_history(event.key):
            event.stop()
            event.prevent_default()
            return
        if not event.is_printable and is_text_char(event.character):
            event.stop()  # TextArea types printable keys only: a ZWJ or a no-break space
            event.prevent_default()  # would vanish from an emoji or a typed name
            self.insert(event.character or "")
            return
        await super()._on_key(event)

    async def _on_paste(self, event: events.Paste) -> None:
        """Pasted text goes in as text (it never sends), its line breaks as newlines:
        terminals send a carriage return for each, which would stay in the message."""
        event.stop()
        event.prevent_default()  # TextArea's own handler would insert the raw text again
        if self.read_only:
            return
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        result = self.replace(text, *self.selection)
        self.move_cursor(result.end_location)

    def action_newline(self) -> None:
        self.insert("\n")

    def action_submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        self.sent_history.append(text)
        self._history_pos = None
        self.post_message(self.Submitted(self, text))

    def restore(self, text: str) -> None:
        """Put text back (e.g. when sending failed before it was saved)."""
        self.load_text(text)
        self.move_cursor(self.document.end)

    def _browse_history(self, key: str) -> bool:
        """Up on the first line / down on the last walks the sent-message history."""
        if not self.sent_history:
            return False
        row, _ = self.cursor_location
        if key == "up" and row == 0 and (not self.text or self._history_pos is not None):
            pos = len(self.sent_history) if self._history_pos is None else self._history_pos
            pos = max(0, pos - 1)
        elif key == "down" and self._history_pos is not None and row == self.document.line_count - 1:
            pos = self._history_pos + 1
            if pos >= len(self.sent_history):
                self._history_pos = None
                self.load_text("")
                return True
        else:
            return False
        self._history_pos = pos
        self.load_text(self.sent_history[pos])
        self.move_cursor(self.document.end)
        return True
