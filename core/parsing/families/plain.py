"""Models without a known tool format: text, with <think> blocks split out."""

from __future__ import annotations

from ..scanner import Grammar
from ._common import think_states

GRAMMAR = Grammar("plain", think_states({}), "text", None, reasoning_state="reasoning",
                  uses_think=True)
