"""One message in the chat view: role, branch marker, thinking block, Markdown body, tool
cards, stats, and errors with what to do about them.

Assistant replies stream into the Markdown body through Textual's MarkdownStream, which
coalesces a fast producer into the frames the terminal can show: no full re-render per
token. A message can take focus (the message cursor); its keys act on that message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from time import monotonic
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Collapsible, Static

from core.events import Error, ToolCall, Usage
from tui.terminal_text import visible
from tui.widgets.body_text import settled_size, typed_lines
from tui.widgets.tool_card import STATES, ToolCard

if TYPE_CHECKING:  # Markdown loads with the first message's body (tui.widgets.body_text)
    from textual.widgets import Markdown
    from textual.widgets._markdown import MarkdownStream

CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)

# What a person can do about each error, shown under it.
ERROR_HINTS = {
    "OOM": "Free memory, lower the context size in Settings (f3), or pick a smaller model (ctrl+p).",
    "MODEL_CORRUPT": "Download the model again, or pick another one (ctrl+p → Model).",
    "UNSUPPORTED": "This model's format is not supported here; pick another one (ctrl+p → Model).",
    "LOAD_FAILED": "Check the model path in Settings (f3) or pick another model (ctrl+p → Model).",
    "CONTEXT_OVERFLOW": "Start a new chat (ctrl+n) or raise the context size in Settings (f3).",
    "CANCELLED": "Stopped. Press r on this reply to regenerate it.",
    "TIMEOUT": "The model took too long. Press r on this reply to try again.",
    "WORKER_CRASHED": "The model process restarts by itself; press r on this reply to try again.",
    "BAD_REQUEST": "Check the sampling settings (f3); they were refused.",
    "INTERNAL": "Press r on this reply to try again; if it repeats, restart llmdeck.",
    "STORE_FAILED": "llmdeck keeps running; free the space or fix the file, then press r on "
                    "this reply to have it again.",
}
GENERIC_HINT = "Press r on this reply to try again."
# Stream frame budget: deltas reach the Markdown at most this often. A chat frame (append,
# relayout, repaint of the chat area) costs 15-20 ms of CPU under a long reply; 30 a second
# keeps the slowest token under 100 ms from the engine to the screen (bench/ui.py: max
# ~80 ms at 1,000 tok/s; at 20 a second the max was 100-130 ms) and still leaves the loop
# free about half the time for keys (p95 ~28 ms).
FRAME_S = 1 / 30
INPUT_FRAME_S = 1 / 60  # how recent a key must be for the stream to let it paint first


def input_pending_paint(app: object) -> bool:
    """Whether a key reached the app within the last screen frame (its paint may wait)."""
    return monotonic() - getattr(app, "last_input_at", float("-inf")) < INPUT_FRAME_S


def code_blocks(markdown: str) -> list[str]:
    """The fenced code blocks of a message, in order (an unclosed last one included)."""
    return [m.group(1).rstrip("\n") for m in CODE_BLOCK.finditer(markdown)]


def format_stats(usage: Usage) -> str:
    parts = [f"TTFT {usage.ttft_ms:.0f} ms", f"{usage.decode_tps:.1f} tok/s",
             f"{usage.completion_tokens} tokens"]
    if usage.cached_tokens:
        parts.append(f"{usage.cached_tokens} cached")
    return " · ".join(parts)


def format_stats_dict(usage: dict | None) -> str:
    if not usage:
        return ""
    try:
        return format_stats(Usage(**{k: usage[k] for k in (
            "prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "decode_tps")}))
    except (KeyError, TypeError):
        return ""


def error_text(message: str, code: str | None, *, remote: bool = False) -> str:
    """The error and the advice under it: a remote's own (check the endpoint, retry) where
    the reply came from one, since "the model process restarts by itself" is not true there."""
    from core.wire.remote import remote_hint  # the pool behind it: not before the first frame

    hint = (remote_hint(code) if remote else None) or ERROR_HINTS.get(code or "", GENERIC_HINT)
    return f"⚠ {message}\n  → {hint}"


def cut_note(tokens: int, filled: int = 0) -> str:
    """The line under a reply that hit its length limit: it is not the whole answer.
    `filled`: the context size the reply filled (0: it stopped at Max tokens), where g
    can go on only once the context is larger."""
    at = f" at {tokens:,} tokens" if tokens else ""
    if filled:
        return (f"✂ cut{at}: it filled the context ({filled:,} tokens) · raise the context "
                "size (F3), then g continues it")
    return f"✂ cut{at} (the length limit) · press g to continue it"


def filled_context(usage: dict | None) -> int:
    """The context size a stored reply filled (its generation's prompt and reply took
    all of it), else 0."""
    usage = usage or {}
    size = int(usage.get("context_size") or 0)
    return size if size and int(usage.get("context_used") or 0) >= size else 0


BRANCH_KEYS = Binding.Group("Branch", compact=True)  # one "[] Branch" in the footer


class MessageView(Vertical):
    """A chat message; assistant ones can stream. Focus it to act on it from the keyboard."""

    can_focus = True
    virtual_size = settled_size()  # see message_body.settled_size

    BINDINGS = [
        Binding("c", "copy", "Copy"),
        Binding("y", "copy_code", "Copy code"),
        Binding("r", "act('regenerate')", "Regenerate"),
        Binding("e", "act('edit')", "Edit"),
        Binding("g", "act('continue')", "Continue", show=False),
        Binding("left_square_bracket", "act('prev_branch')", "◀ Branch", key_display="[",
                group=BRANCH_KEYS),
        Binding("right_square_bracket", "act('next_branch')", "Branch ▶", key_display="]",
                group=BRANCH_KEYS),
        Binding("d", "act('delete')", "Delete"),
        Binding("up,k", "move(-1)", "Previous message", show=False),
        Binding("down,j", "move(1)", "Next message", show=False),
        Binding("t", "toggle_thinking", "Thinking", show=False),
    ]

    @dataclass
    class Action(Message):
        """A message action the screen carries out (it owns the runtime)."""

        view: MessageView
        action: str

    def __init__(self, role: str, content: str = "", *, reasoning: str = "",
                 stats: str = "", error: str | None = None, status: str = "complete",
                 message_id: str | None = None, branch: tuple[int, int] | None = None,
                 tool_results: list[Any] | None = None, tokens: int = 0,
                 filled: int = 0) -> None:
        super().__init__(classes=f"message {role}")
        self.tokens = tokens  # the reply's completion tokens (the cut line says them)
        self.filled = filled  # the context size the reply filled, if it did (cut_note)
        self._tokens_before = 0  # a continued reply's tokens before this generation
        self.role = role
        self.message_id = message_id
        self._content = [content] if content else []  # pieces; joined when read
        self.reasoning = reasoning
        self.branch = branch
        self._stats = stats
        self._error = error
        self._status = status
        self._tool_results = tool_results or []
        self._stream: MarkdownStream | None = None
        self._thinking_stream: MarkdownStream | None = None
        self._code_index = 0
        self._pending_text: list[str] = []
        self._pending_reasoning: list[str] = []
        self._flush_timer: Timer | None = None
        self._first_words = False  # a stream's first words are on their way (no frame's wait)
        self._stream_shown = False  # the current stream has flushed text: frames from now on

    def compose(self) -> ComposeResult:
        from tui.widgets.message_body import MessageBody, SafeMarkdown

        yield Static(visible(self._role_label()), classes="role", markup=False)
        with Collapsible(title="Thinking", collapsed=True, classes="thinking") as c:
            c.display = bool(self.reasoning)
            yield SafeMarkdown(self.reasoning, classes="reasoning")
        # A user's message shows its line breaks as typed; a reply is Markdown as written.
        body = MessageBody(typed_lines(self.content) if self.role == "user" else self.content,
                           classes="body")
        body.display = self.role != "tool"  # a tool message is its cards
        yield body
        for record in self._tool_results:  # stored ToolStatus records (core.tools.loop)
            if isinstance(record, dict):
                state = record.get("state", "done")
                yield ToolCard(record.get("id", ""), record.get("name", "?"),
                               record.get("arguments") or {},
                               state=state if state in STATES else "done",
                               result=str(record.get("content", "")))
        stats = Static(self._stats, classes="stats")
        stats.display = bool(self._stats)
        yield stats
        cut = Static(cut_note(self.tokens, self.filled), classes="cut", markup=False)
        cut.display = self._status == "cut"
        yield cut
        err = Static(visible(self._error or ""), classes="error", markup=False)
        err.display = bool(self._error)
        yield err

    def _role_label(self) -> str:
        label = {"user": "You", "assistant": "Assistant", "system": "System",
                 "tool": "Tools"}.get(self.role, self.role)
        if self._status == "partial":
            label += " (interrupted)"
        elif self._status == "stopped":
            label += " (stopped)"
        if self.branch:
            label += f"  ‹ {self.branch[0]}/{self.branch[1]} ›"
        return label

    @property
    def status(self) -> str:
        return self._status

    @property
    def content(self) -> str:
        """The message text (a streamed reply's pieces are joined once, when read)."""
        if len(self._content) > 1:
            self._content = ["".join(self._content)]
        return self._content[0] if self._content else ""

    @content.setter
    def content(self, text: str) -> None:
        self._content = [text] if text else []

    @property
    def body(self) -> Markdown:
        from textual.widgets import Markdown

        return self.query_one(".body", Markdown)

    @property
    def thinking(self) -> Collapsible:
        return self.query_one(".thinking", Collapsible)

    @property
    def streaming(self) -> bool:
        return self._stream is not None or self._thinking_stream is not None

    # -- streaming -------------------------------------------------------------------------
    # Deltas are buffered and handed to the Markdown streams at most once a frame (FRAME_S):
    # a 1,000 tok/s producer then costs one Markdown append and one layout per frame, not
    # per token, and keys typed meanwhile are not queued behind token work.
    async def append_text(self, text: str) -> None:
        if self._thinking_stream is not None:  # the answer starts: fold the thinking away
            await self._flush()
            await self._thinking_stream.stop()
            self._thinking_stream = None
            self.thinking.collapsed = True
        if self._stream is None:
            from textual.widgets import Markdown

            self._stream = Markdown.get_stream(self.body)
            self._stream_shown = False
        self._content.append(text)
        self._pending_text.append(text)
        self._schedule_flush()

    async def append_reasoning(self, text: str) -> None:
        block = self.thinking
        if not block.display:
            block.display = True
            block.collapsed = False
        if self._thinking_stream is None:
            from textual.widgets import Markdown

            self._thinking_stream = Markdown.get_stream(self.query_one(".reasoning", Markdown))
            self._stream_shown = False
        self.reasoning += text
        self._pending_reasoning.append(text)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_timer is not None or self._first_words:
            return
        if not self._stream_shown:
            # A stream's first words go at once: nothing of it shows yet, and a frame's wait
            # only added to the time to its first word (bench/ui.py: the latest tokens of a
            # 1,000 tok/s reply were its first, ~110 ms from the engine to the screen).
            self._first_words = self._stream_shown = True
            self.call_later(self._flush_first_words)
            return
        self._flush_timer = self.set_timer(FRAME_S, self._flush_after_input)

    async def _flush_first_words(self) -> None:
        self._first_words = False
        await self._flush_after_input()

    async def _flush_after_input(self) -> None:
        """Keys first: when the user just typed, the frame showing that key is painted
        alone, and the stream's relayout comes right after it (deferred once a frame, so
        a fast typist cannot stall the stream)."""
        if input_pending_paint(self.app):
            self.call_after_refresh(self._flush)
            return
        await self._flush()

    async def _flush(self) -> None:
        self._flush_timer = None
        if self._pending_reasoning and self._thinking_stream is not None:
            text = "".join(self._pending_reasoning)
            self._pending_reasoning.clear()
            await self._thinking_stream.write(text)
        if self._pending_text and self._stream is not None:
            text = "".join(self._pending_text)
            self._pending_text.clear()
            await self._stream.write(text)

    async def add_tool_call(self, call: ToolCall, state: str = "awaiting-approval") -> ToolCard:
        """A card for a call the model just made; the tool loop's statuses move its state."""
        if call.error:
            state = "failed"
        card = ToolCard(call.id, call.name, call.arguments, state=state, error=call.error)
        await self.mount(card, before=self.query_one(".stats"))
        return card

    def tool_card(self, call_id: str) -> ToolCard | None:
        return next((c for c in self.query(ToolCard) if c.call_id == call_id), None)

    def set_status(self, status: str) -> None:
        """The stored status (partial, stopped, cut, ...) once a streamed reply ends."""
        self._status = status
        self.query_one(".role", Static).update(visible(self._role_label()))
        cut = self.query_one(".cut", Static)
        cut.update(cut_note(self.tokens, self.filled))
        cut.display = status == "cut"

    def begin_continue(self) -> None:
        """This cut reply streams on (continued in place): the cut line goes until it ends."""
        self._tokens_before = self.tokens
        self.set_status("complete")

    def set_branch(self, branch: tuple[int, int] | None) -> None:
        self.branch = branch
        self.query_one(".role", Static).update(visible(self._role_label()))

    def set_usage(self, usage: Usage, context: int = 0) -> None:
        """This generation's counts; `context`: the model's context size, to tell a reply
        that filled it. A continued reply's stats count the whole reply, as stored."""
        self.tokens = self._tokens_before + usage.completion_tokens
        used = usage.prompt_tokens + usage.completion_tokens
        self.filled = context if context and used >= context else 0
        stats = self.query_one(".stats", Static)
        stats.update(format_stats(replace(usage, completion_tokens=self.tokens)))
        stats.display = True

    def show_error(self, error: Error, *, remote: bool = False) -> None:
        err = self.query_one(".error", Static)
        err.update(visible(error_text(error.message, error.code, remote=remote)))  # a remote's words, too
        err.display = True

    async def finish(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
        await self._flush()
        for stream in (self._thinking_stream, self._stream):
            if stream is not None:
                await stream.stop()
        if self._stream is not None:
            from tui.widgets.message_body import MessageBody

            body = self.body
            if isinstance(body, MessageBody):
                body.mark_last()
        self._stream = self._thinking_stream = None

    # -- keyboard actions ------------------------------------------------------------------
    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.content)
        self.notify(f"Copied the message ({len(self.content)} characters).", timeout=2)

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.content)
        if not blocks:
            self.notify("This message has no code block; press c to copy all of it.", timeout=3)
            return
        index = self._code_index % len(blocks)
        self._code_index += 1
        self.app.copy_to_clipboard(blocks[index])
        self.notify(f"Copied code block {index + 1}/{len(blocks)}.", timeout=2)

    def action_act(self, action: str) -> None:
        self.post_message(self.Action(self, action))

    def action_toggle_thinking(self) -> None:
        if self.thinking.display:
            self.thinking.collapsed = not self.thinking.collapsed

    def action_move(self, step: int) -> None:
        views = list(self.screen.query(MessageView))
        index = views.index(self) + step
        if 0 <= index < len(views):
            views[index].focus()
            views[index].scroll_visible(animate=False)
        elif step < 0:
            self.post_message(self.Action(self, "load_older"))
