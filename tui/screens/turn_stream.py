"""A turn's events drawn into the chat (text, thinking, tool cards, stats, errors, the end),
and the composer's note while turns are busy.

The chat screen's `run_turn` owns the turn (busy gate, bindings, branch labels); this is
only the drawing, apart so the screen stays small. A reply that ends at its length limit
(Done "length") is marked cut under its text, as the store has it, so it never looks
finished; `g` on it continues it (MessageActions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.events import Done, Error, ReasoningDelta, TextDelta, ToolCall, Usage
from tui.widgets.chat_view import ChatView
from tui.widgets.composer import Composer
from tui.widgets.image_card import show_tool_images
from tui.widgets.message_view import MessageView
from tui.widgets.status_bar import StatusBar

# What the reply's status reads once it ends this way (as the ReplyRecorder stores it).
END_STATUS = {"cancelled": "stopped", "length": "cut"}


async def draw_events(turn: Any, reply: MessageView, chat: ChatView, bar: StatusBar,
                      runtime: Any, conversation_id: str | None,
                      counted: Callable[[str], None] | None = None) -> MessageView:
    """Draw `turn`'s events into `reply` (and the replies after a tool round); returns the
    last reply view, to finish. `counted` hears each piece of text as it streams (the
    header's ctx counts as it goes: StatusBar.count_from)."""
    from core.wire.tools import ToolStatus  # not before the first frame (issue 48)

    counted = counted or (lambda _text: None)
    after_tools = False  # text after a tool round is a new assistant message
    async for event in turn.events():
        if isinstance(event, (TextDelta, ReasoningDelta)) and after_tools:
            after_tools = False
            await reply.finish()
            reply = await chat.add_message(MessageView("assistant"))
        if isinstance(event, TextDelta):
            await reply.append_text(event.text)
            counted(event.text)
        elif isinstance(event, ReasoningDelta):
            await reply.append_reasoning(event.text)
            counted(event.text)
        elif isinstance(event, ToolCall):
            await reply.add_tool_call(event)
        elif isinstance(event, ToolStatus):
            if not after_tools:
                after_tools = True
                reply.message_id = turn.assistant_message_id
            card = reply.tool_card(event.call.id) or await reply.add_tool_call(event.call)
            card.state = event.state
            card.result = event.result
            if event.final and event.figures:  # an MCP image: attached, shown here
                await show_tool_images(card, runtime, conversation_id, event.figures)
        elif isinstance(event, Usage):
            reply.set_usage(event, bar.context_size)
            bar.context_used = event.prompt_tokens + event.completion_tokens
        elif isinstance(event, Error):
            reply.show_error(event, remote=runtime.model_is_remote())
        elif isinstance(event, Done):
            if event.finish_reason in END_STATUS:
                reply.set_status(END_STATUS[event.finish_reason])
            break
    return reply


def show_composer_state(screen: Any) -> None:
    """The composer says what Enter does while the app is busy, so it never looks dead:
    it takes keys at all times, and a message sent meanwhile waits its turn."""
    found = screen.query(Composer)
    if not found:  # not composed yet, or the app is closing
        return
    composer = found.first()
    state = screen.runtime.model_state().state
    queued = len(screen.queued_texts())
    if queued:
        note = f"{queued} queued: sent after this reply · esc stops and returns them"
    elif screen.busy:
        note = "replying… type your next message: enter queues it · esc stops"
    elif state in ("loading", "provisioning"):
        note = "the model is loading… type away: enter sends when it is ready"
    else:
        note = ""
    composer.placeholder = note if not queued else ""
    composer.border_subtitle = note if queued else None
