"""Validation of the settings a person types, field by field.

Each rule refuses a value with a sentence that says what is allowed, so the settings
screen can show the reason next to the field the moment it is typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MIN_CONTEXT = 256
MAX_CONTEXT = 1_048_576


class Refused(ValueError):
    """A value the settings cannot take; str() is the reason to show."""


def _number(text: str, label: str, cast: Callable[[str], float]) -> float:
    try:
        return cast(text.strip())
    except ValueError:
        kind = "a whole number" if cast is int else "a number"
        raise Refused(f"{label} must be {kind}.") from None


def temperature(text: str) -> float:
    value = _number(text, "Temperature", float)
    if not 0.0 <= value <= 2.0:
        raise Refused("Temperature must be between 0 and 2.")
    return value


def top_p(text: str) -> float:
    value = _number(text, "Top-p", float)
    if not 0.0 <= value <= 1.0:
        raise Refused("Top-p must be between 0 and 1.")
    return value


def top_k(text: str) -> int:
    value = int(_number(text, "Top-k", int))
    if value < 1:
        raise Refused("Top-k must be 1 or more.")
    return value


def context_size(text: str) -> int:
    value = int(_number(text, "Context size", int))
    if not MIN_CONTEXT <= value <= MAX_CONTEXT:
        raise Refused(f"Context size must be between {MIN_CONTEXT} and {MAX_CONTEXT}.")
    return value


def max_tokens(text: str, context: int) -> int:
    value = int(_number(text, "Max tokens", int))
    if value < 1:
        raise Refused("Max tokens must be 1 or more.")
    if value >= context:
        raise Refused(f"Max tokens must be less than the context size ({context}).")
    return value


@dataclass
class SettingsValues:
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    context_size: int
    system_prompt: str
    theme: str


def validate_all(fields: dict[str, str], system_prompt: str, theme: str) -> tuple[SettingsValues | None, dict[str, str]]:
    """Check every field; returns the values, or None and {field: reason}."""
    problems: dict[str, str] = {}
    out: dict[str, float | int] = {}
    for name, rule in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
                       ("context_size", context_size)):
        try:
            out[name] = rule(fields.get(name, ""))
        except Refused as exc:
            problems[name] = str(exc)
    ctx = int(out.get("context_size", MAX_CONTEXT))
    try:
        out["max_tokens"] = max_tokens(fields.get("max_tokens", ""), ctx)
    except Refused as exc:
        problems["max_tokens"] = str(exc)
    if problems:
        return None, problems
    return SettingsValues(system_prompt=system_prompt, theme=theme, **out), {}  # type: ignore[arg-type]
