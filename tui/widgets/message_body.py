"""The Markdown body of a message, whose last block carries the class `-last`.

Why not `MarkdownBlock:last-child` in the stylesheet: Textual re-applies the whole
stylesheet to every sibling that has an order-dependent rule (:last-child, :first-child,
...) each time a widget is mounted among them. A streamed reply mounts a block per
paragraph, so a :last-child rule re-styled all earlier blocks each time: quadratic in the
length of the reply, and the largest cost per frame of a long stream. Moving one class
from the old last block to the new one re-styles two widgets.
"""

from __future__ import annotations

import re

from textual.await_complete import AwaitComplete
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownBlock

from tui.terminal_text import visible

LAST = "-last"

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
# A line that starts a block of its own (a list item, heading, quote, fence, table row,
# rule): no hard break is needed before it, and one would glue it to the line above.
_BLOCK_START = re.compile(r"^\s*([-*+]\s|\d{1,9}[.)]\s|#{1,6}\s|>|```|~~~|\||---|___|\*\*\*)")
# A line that is a block by itself (a heading, a rule): a backslash there would show.
_OWN_LINE = re.compile(r"^\s{0,3}(#{1,6}(\s|$)|-{3,}\s*$|_{3,}\s*$|\*{3,}\s*$)")


def typed_lines(markdown: str) -> str:
    """A user's message as typed: every line break kept (Markdown joins the lines of a
    paragraph, so a list typed one number a line with Ctrl+J showed as "1 2 3"; issue 48). A break
    inside a paragraph becomes a hard break (a backslash at the line's end); code
    fences, blank lines and lines that start their own block are left as they are."""
    lines = markdown.split("\n")
    fenced = False
    for i, line in enumerate(lines[:-1]):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        following = lines[i + 1]
        if (fenced or not line.strip() or not following.strip() or line.endswith("\\")
                or _BLOCK_START.match(following) or line.lstrip().startswith("|")
                or _OWN_LINE.match(line)
                or line.startswith(("    ", "\t"))):  # an indented code block
            continue
        lines[i] = line.rstrip(" ") + "\\"
    return "\n".join(lines)


def settled_size() -> Reactive[Size]:
    """A `virtual_size` that repaints but asks for no layout when it changes.

    Textual's own `virtual_size` is declared with layout=True, and the compositor sets it
    during every layout: so each layout that grows a streamed block (and its message, and
    the chat) asked for a second, full layout of the chat in the next frame, which changed
    nothing. For a widget whose size is the outcome of layout, not an input to it (blocks,
    message containers), that second pass is pure cost.
    """
    return Reactive(Size(0, 0), layout=False)


_QUIET_BLOCKS: dict[type[MarkdownBlock], type[MarkdownBlock]] = {}


def quiet_block(cls: type[MarkdownBlock]) -> type[MarkdownBlock]:
    """`cls` with a settled_size (same name, so every CSS rule for it still applies)."""
    quiet = _QUIET_BLOCKS.get(cls)
    if quiet is None:
        quiet = _QUIET_BLOCKS[cls] = type(cls.__name__, (cls,), {
            "virtual_size": settled_size(), "__module__": __name__,
            "__doc__": cls.__doc__})
    return quiet


class SafeMarkdown(Markdown):
    """Markdown of outside text (a reply, its thinking): control characters are shown, not
    sent to the terminal (tui.terminal_text). update() and append() are the only doors:
    the initial text and a MarkdownStream both come through them."""

    def update(self, markdown: str) -> AwaitComplete:
        return super().update(visible(markdown))

    def append(self, markdown: str) -> AwaitComplete:
        return super().append(visible(markdown))


class MessageBody(SafeMarkdown):
    """Markdown that marks its last block (themes style `.body > .-last`).

    A streamed body (Markdown.append) is marked once, when its stream ends
    (MessageView.finish calls mark_last): moving the class at every new paragraph
    re-styled two blocks each time for a blank line nobody sees under a growing reply.
    """

    virtual_size = settled_size()

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003  (Markdown's signature)
        super().__init__(*args, **kwargs)
        self._last: Widget | None = None

    def get_block_class(self, block_name: str) -> type[MarkdownBlock]:
        return quiet_block(super().get_block_class(block_name))

    def update(self, markdown: str) -> AwaitComplete:
        return AwaitComplete(self._mark_after(super().update(markdown)))

    async def _mark_after(self, change: AwaitComplete) -> None:
        await change
        self.mark_last()

    def mark_last(self) -> None:
        children = self.children
        last = children[-1] if children else None
        if last is self._last:
            return
        if self._last is not None:
            self._last.remove_class(LAST)
        if last is not None:
            last.add_class(LAST)
        self._last = last
