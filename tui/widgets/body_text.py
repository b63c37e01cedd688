"""What a message's body needs before Markdown is loaded: a user's text as typed, and the
size reactive of widgets whose size is layout's outcome.

Apart from tui.widgets.message_body because that module subclasses Textual's Markdown,
whose import (markdown-it, pygments: ~33 ms) the first frame does not need: the chat
opens empty or on one conversation, and the app loads Markdown once it is up
(tui.app.start_runtime). The chat view and MessageView import this module instead.
"""

from __future__ import annotations

import re

from textual.geometry import Size
from textual.reactive import Reactive

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
