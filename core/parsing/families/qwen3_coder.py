"""Qwen3-Coder: `<tool_call><function=name><parameter=p>v</parameter></function></tool_call>`.

The shared tool_call reader accepts both XML and JSON bodies, so the grammar is hermes'
with the family's own name; Qwen3.5-style models with thinking use it as well.
"""

from __future__ import annotations

from .hermes import grammar

GRAMMAR = grammar("qwen3-coder")
