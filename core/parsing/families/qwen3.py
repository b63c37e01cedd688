"""Qwen3: hermes tool calls plus <think> reasoning (the template may open it in the prompt)."""

from __future__ import annotations

from .hermes import grammar

GRAMMAR = grammar("qwen3")
