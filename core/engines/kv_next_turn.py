"""What the next turn's prompt will start with, so the cache kept after a reply is the one
that prompt can reuse.

A finished request's cache holds its prompt and the reply as generated, reasoning
included. Many chat templates render an earlier reply differently on the next turn:
Qwen3's (and DeepSeek-R1's, QwQ's...) drop the reasoning of every assistant turn before
the last user message, so the next prompt leaves the cached tokens right after the
previous prompt, and all of the reply is prefilled again (mlx-lm's users measured 0%
reuse per turn on such models once the reply dominates). Rendering the conversation as
it will be sent next (the reply as the client keeps it: the parsed content, reasoning
split off) gives the text every next prompt shares, whatever the person writes; the
engine prefills just the reply's new rendering on top of the previous prompt's cache,
off the request path, and keeps that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from core.events import TextDelta, ToolCall

# Two user messages that differ in their first character: the rendered texts agree up to
# where the next user message's content starts.
_PROBES = ("\x01", "\x02")


def reply_content(raw: str, family: str) -> str | None:
    """The reply as a client keeps it (the stream parser's content, reasoning split off),
    or None when the reply made a tool call (its next rendering depends on the result)."""
    from core.parsing import StreamParser

    parser = StreamParser(family)
    events = parser.feed(raw) + parser.finish()
    if any(isinstance(e, ToolCall) for e in events):
        return None
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def next_turn_prefix(render: Callable[[list[dict[str, Any]]], str],
                     messages: Sequence[dict[str, Any]], content: str, prompt_text: str) -> str | None:
    """The text every next prompt of this conversation starts with, or None when the
    template does not render the history stably (the next prompt would not start with
    this one's text, so nothing is gained over keeping the cache as generated)."""
    convo = [dict(m) for m in messages] + [{"role": "assistant", "content": content}]
    try:
        a, b = (render([*convo, {"role": "user", "content": p}]) for p in _PROBES)
    except Exception:  # noqa: BLE001 - a template that fails here just loses the optimisation
        return None
    shared = os.path.commonprefix([a, b])
    if len(shared) <= len(prompt_text) or not shared.startswith(prompt_text):
        return None
    return shared
