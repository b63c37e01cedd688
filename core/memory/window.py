"""The context wind monitor: how full a conversation's context will be before prefill.

Counting exactly needs the chat model's tokenizer, which lives in the worker; the
runtime has to decide before it sends anything. So the monitor counts with the cheap
approximation from core.docs.chunking and corrects it with the real prompt token count
the engine reports after each turn (`observe`): the ratio real/approximate is kept per
conversation, so the projection follows the model actually loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.docs.chunking import count_tokens

DEFAULT_THRESHOLD = 0.7
PREPARE_AT = 0.6  # from here the summary that makes room is written in the background
MIN_REPLY_ROOM = 256
REPLY_ROOM_SHARE = 0.25
# Role markers and separators a chat template adds per message, roughly.
MESSAGE_OVERHEAD_TOKENS = 4

Message = dict[str, Any]


def messages_tokens(messages: Sequence[Message], count: Callable[[str], int] = count_tokens) -> int:
    """Approximate prompt tokens of `messages` as a chat template would render them."""
    return sum(count(str(m.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def reply_room(context_tokens: int, max_tokens: int = 0) -> int:
    """Tokens kept free for the reply: min(max_tokens, max(256, 25% of the context));
    max_tokens 0 (no cap of its own) leaves the second term."""
    room = max(MIN_REPLY_ROOM, int(context_tokens * REPLY_ROOM_SHARE))
    return min(max_tokens, room) if max_tokens > 0 else room


class ContextMonitor:
    """Projects context use per conversation and says when to roll over."""

    def __init__(
        self,
        context_tokens: int,
        threshold: float = DEFAULT_THRESHOLD,
        reply_reserve: int = 0,
        count: Callable[[str], int] = count_tokens,
        reply_room: int = 0,
    ) -> None:
        if context_tokens < 1:
            raise ValueError(f"context_tokens must be at least 1 (got {context_tokens})")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be above 0 and at most 1 (got {threshold})")
        self.context_tokens = context_tokens
        self.threshold = threshold
        self.reply_reserve = reply_reserve
        self.reply_room = reply_room  # kept free for the reply: a prompt past it must roll
        self.count = count
        self._scale: dict[str, float] = {}
        self.last_prompt_tokens: dict[str, int] = {}

    def scale(self, conversation_id: str | None) -> float:
        return self._scale.get(conversation_id or "", 1.0)

    def used(self, messages: Sequence[Message], conversation_id: str | None = None) -> int:
        """Estimated tokens `messages` take, corrected by what the engine last reported."""
        return round(messages_tokens(messages, self.count) * self.scale(conversation_id))

    def projected_use(
        self,
        messages: Sequence[Message],
        new_prompt_tokens: int,
        conversation_id: str | None = None,
    ) -> float:
        """Fraction of the context the next request would fill (can exceed 1.0)."""
        scaled_new = round(new_prompt_tokens * self.scale(conversation_id))
        total = self.used(messages, conversation_id) + scaled_new + self.reply_reserve
        return total / self.context_tokens

    def should_roll(
        self,
        messages: Sequence[Message],
        new_prompt_tokens: int,
        conversation_id: str | None = None,
    ) -> bool:
        return self.projected_use(messages, new_prompt_tokens, conversation_id) >= self.threshold

    def leaves_no_room(
        self,
        messages: Sequence[Message],
        new_prompt_tokens: int,
        conversation_id: str | None = None,
    ) -> bool:
        """Whether the next prompt would leave less than `reply_room` tokens for the reply:
        then the conversation rolls over now, whatever else waits."""
        scaled_new = round(new_prompt_tokens * self.scale(conversation_id))
        prompt = self.used(messages, conversation_id) + scaled_new
        return prompt + self.reply_room > self.context_tokens

    def observe(
        self, conversation_id: str, messages: Sequence[Message], prompt_tokens: int
    ) -> None:
        """Learn from the engine's real count (Usage.prompt_tokens) for these messages."""
        estimate = messages_tokens(messages, self.count)
        self.last_prompt_tokens[conversation_id] = prompt_tokens
        if estimate > 0 and prompt_tokens > 0:
            # Clamp: one odd turn (a huge code block) must not swing the projection wildly.
            self._scale[conversation_id] = min(4.0, max(0.25, prompt_tokens / estimate))
