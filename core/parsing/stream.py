"""StreamParser: one model family's output format, fed token text as it arrives.

Engines call `feed` with each decoded delta and `finish` at the end; what comes back is
TextDelta / ReasoningDelta / ToolCall events, the same for any chunking of the stream.
Adjacent deltas of one kind may be merged by the caller (the split is not part of the
contract).
"""

from __future__ import annotations

from .families import grammar_for
from .scanner import MarkerScanner


class StreamParser(MarkerScanner):
    """Splits reasoning and tool calls out of a model's text stream.

    `in_reasoning=True` when the chat template already opened the reasoning block in the
    prompt (DeepSeek-R1, Qwen3 thinking, MiniMax-M2): the stream then starts as thinking.
    Families without a reasoning block ignore it. `continues=True` when the stream goes
    on from a reply already written (GenerationRequest.reply_prefix): its leading space
    is the space between two words, not the start of a reply, so it is kept.
    """

    __slots__ = ("family",)

    def __init__(self, family: str, *, in_reasoning: bool = False,
                 continues: bool = False) -> None:
        grammar = grammar_for(family)
        start = grammar.reasoning_state if in_reasoning and grammar.reasoning_state else None
        super().__init__(grammar, start=start)
        self.family = family
        self._lstrip = not continues


def family_uses_think(family: str) -> bool:
    """Whether the family's format has a reasoning block (for the UI and settings)."""
    return grammar_for(family).uses_think


def family_markers(family: str) -> frozenset[str]:
    """Every literal marker of the family's format (none of them may reach the user)."""
    return frozenset(grammar_for(family).markers())
