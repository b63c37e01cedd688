"""The MLX face of core.engines.tool_grammar: one request's tool-call constraint as a batch
row's MaskedProcessor.

As a MaskedProcessor it joins core.engines.grammar's batched mask: in a batch step every
row whose call is open is masked in one fused op with the response_format rows, and a row
in free text costs nothing (no matcher, no mask). Alone it masks its own row.
"""

from __future__ import annotations

from typing import Any

from core.engines.grammar import MaskedProcessor
from core.engines.tool_grammar import ToolCallGuide


class ToolCallProcessor(MaskedProcessor):
    """Masks a row only while its tool call is open (see the module docstring)."""

    def __init__(self, guide: ToolCallGuide, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.guide = guide

    def consume(self, token: int) -> None:
        self.guide.advance(token)

    def active_matcher(self) -> Any | None:
        return self.guide.matcher
