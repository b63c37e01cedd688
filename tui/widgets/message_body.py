"""The Markdown body of a message, whose last block carries the class `-last`.

Why not `MarkdownBlock:last-child` in the stylesheet: Textual re-applies the whole
stylesheet to every sibling that has an order-dependent rule (:last-child, :first-child,
...) each time a widget is mounted among them. A streamed reply mounts a block per
paragraph, so a :last-child rule re-styled all earlier blocks each time: quadratic in the
length of the reply, and the largest cost per frame of a long stream. Moving one class
from the old last block to the new one re-styles two widgets.
"""

from __future__ import annotations

from textual.await_complete import AwaitComplete
from textual.widget import Widget
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownBlock

from tui.terminal_text import visible
from tui.widgets.body_text import settled_size

LAST = "-last"

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
