"""One module per model family, each exporting GRAMMAR; adding a family is adding a file."""

from __future__ import annotations

from importlib import import_module

from ..scanner import Grammar

_MODULES = {
    "hermes": "hermes",
    "qwen3": "qwen3",
    "qwen3-coder": "qwen3_coder",
    "llama3": "llama3",
    "mistral": "mistral",
    "glm": "glm",
    "deepseek": "deepseek",
    "kimi": "kimi",
    "gpt-oss": "gpt_oss",
    "lfm2": "lfm2",
    "minimax": "minimax",
    "gemma": "gemma",
    "plain": "plain",
}

FAMILIES: tuple[str, ...] = tuple(_MODULES)
"""Every model family (what detection and settings may name)."""

# Readers that are not a model's own format: a forced call written as bare JSON on a model
# whose format cannot be forced (json_call's docstring). StreamParser accepts these too.
_READERS = {"json-call": "json_call"}
JSON_CALL = "json-call"

_cache: dict[str, Grammar] = {}


def grammar_for(family: str) -> Grammar:
    """The compiled grammar of a family (imported on first use, then shared)."""
    g = _cache.get(family)
    if g is None:
        module = _MODULES.get(family) or _READERS.get(family)
        if module is None:
            raise UnknownFamilyError(family)
        g = _cache[family] = import_module(f"{__name__}.{module}").GRAMMAR
    return g


class UnknownFamilyError(ValueError):
    """A family name that no parser module handles (a setting typo, or a stale config)."""

    code = "BAD_REQUEST"

    def __init__(self, family: str) -> None:
        self.family = family
        super().__init__(
            f"Unknown model family {family!r} for parsing; use one of: {', '.join(FAMILIES)}."
        )
