"""One message in the chat view: role, thinking block, Markdown body, stats, errors.

Assistant replies stream into the Markdown body through Textual's MarkdownStream, which
coalesces a fast producer into the frames the terminal can show: no full re-render per
token.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets._markdown import MarkdownStream

from core.events import Error, Usage


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


class MessageView(Vertical):
    """A chat message; assistant ones can stream."""

    def __init__(self, role: str, content: str = "", *, reasoning: str = "",
                 stats: str = "", error: str | None = None, status: str = "complete") -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self._content = content
        self._reasoning = reasoning
        self._stats = stats
        self._error = error
        self._status = status
        self._stream: MarkdownStream | None = None
        self._thinking_stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        label = {"user": "You", "assistant": "Assistant", "system": "System"}.get(self.role, self.role)
        if self._status == "partial":
            label += " (interrupted)"
        yield Static(label, classes="role")
        with Collapsible(title="Thinking", collapsed=True, classes="thinking") as c:
            c.display = bool(self._reasoning)
            yield Markdown(self._reasoning, classes="reasoning")
        yield Markdown(self._content, classes="body")
        stats = Static(self._stats, classes="stats")
        stats.display = bool(self._stats)
        yield stats
        err = Static(self._error or "", classes="error")
        err.display = bool(self._error)
        yield err

    @property
    def body(self) -> Markdown:
        return self.query_one(".body", Markdown)

    async def append_text(self, text: str) -> None:
        if self._thinking_stream is not None:
            await self._thinking_stream.stop()
            self._thinking_stream = None
            self.query_one(".thinking", Collapsible).collapsed = True
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        await self._stream.write(text)

    async def append_reasoning(self, text: str) -> None:
        block = self.query_one(".thinking", Collapsible)
        if not block.display:
            block.display = True
            block.collapsed = False
        if self._thinking_stream is None:
            self._thinking_stream = Markdown.get_stream(self.query_one(".reasoning", Markdown))
        await self._thinking_stream.write(text)

    def set_usage(self, usage: Usage) -> None:
        stats = self.query_one(".stats", Static)
        stats.update(format_stats(usage))
        stats.display = True

    def show_error(self, error: Error) -> None:
        err = self.query_one(".error", Static)
        err.update(f"⚠ {error.message}")
        err.display = True

    async def finish(self) -> None:
        for stream in (self._thinking_stream, self._stream):
            if stream is not None:
                await stream.stop()
        self._stream = self._thinking_stream = None
