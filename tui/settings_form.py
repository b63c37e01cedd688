"""Validation of the settings a person types, field by field.

Each rule refuses a value with a sentence that says what is allowed, so the settings
screen can show the reason next to the field the moment it is typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MIN_CONTEXT = 256
MAX_CONTEXT = 1_048_576
# Python sandbox limits. Below 256 MiB the sandbox's own interpreter and imports do not
# fit its address-space limit; an hour is long enough for any run a chat should wait on.
MIN_PYTHON_MEMORY_MB, MAX_PYTHON_MEMORY_MB = 256, 65_536
MIN_PYTHON_TIMEOUT_S, MAX_PYTHON_TIMEOUT_S = 1.0, 3600.0
MAX_PENALTY_WINDOW = 32_768  # as core.engines.base.MAX_PENALTY_WINDOW


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


def min_p(text: str) -> float:
    value = _number(text, "Min-p", float)
    if not 0.0 <= value <= 1.0:
        raise Refused("Min-p must be between 0 (off) and 1.")
    return value


def repetition_penalty(text: str) -> float:
    value = _number(text, "Repetition penalty", float)
    if not 0.5 <= value <= 2.0:
        raise Refused("Repetition penalty must be between 0.5 and 2 (1 is off).")
    return value


def _additive_penalty(label: str) -> Callable[[str], float]:
    def rule(text: str) -> float:
        value = _number(text, label, float)
        if not -2.0 <= value <= 2.0:
            raise Refused(f"{label} must be between -2 and 2 (0 is off).")
        return value
    return rule


presence_penalty = _additive_penalty("Presence penalty")
frequency_penalty = _additive_penalty("Frequency penalty")


def penalty_window(text: str) -> int:
    value = int(_number(text, "Penalty window", int))
    if not 1 <= value <= MAX_PENALTY_WINDOW:
        raise Refused(f"Penalty window must be between 1 and {MAX_PENALTY_WINDOW} tokens.")
    return value


def seed(text: str) -> int:
    """A blank field means a fresh random seed per reply (stored as -1)."""
    if not text.strip():
        return -1
    value = int(_number(text, "Seed", int))
    if not 0 <= value < 2**63:
        raise Refused("Seed must be a whole number from 0, or blank for a random one.")
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


def python_timeout(text: str) -> float:
    value = _number(text, "Python time limit", float)
    if not MIN_PYTHON_TIMEOUT_S <= value <= MAX_PYTHON_TIMEOUT_S:
        raise Refused(f"Python time limit must be between {MIN_PYTHON_TIMEOUT_S:g} and "
                      f"{MAX_PYTHON_TIMEOUT_S:g} seconds.")
    return value


def python_memory(text: str) -> int:
    value = int(_number(text, "Python memory limit", int))
    if not MIN_PYTHON_MEMORY_MB <= value <= MAX_PYTHON_MEMORY_MB:
        raise Refused(f"Python memory limit must be between {MIN_PYTHON_MEMORY_MB} and "
                      f"{MAX_PYTHON_MEMORY_MB} MiB.")
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
    python_timeout_s: float = 30.0
    python_memory_mb: int = 1024
    tools_enabled: bool = True
    python_asks: bool = True
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int = 64
    seed: int = -1


def validate_all(fields: dict[str, str], system_prompt: str, theme: str, *,
                 tools_enabled: bool = True, python_asks: bool = True,
                 ) -> tuple[SettingsValues | None, dict[str, str]]:
    """Check every field; returns the values, or None and {field: reason}. The Python
    limits are checked only when given, so a form without the tools section still works."""
    problems: dict[str, str] = {}
    out: dict[str, float | int] = {}
    rules = [("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
             ("context_size", context_size)]
    rules += [(name, rule) for name, rule in (("python_timeout_s", python_timeout),
                                              ("python_memory_mb", python_memory),
                                              *SAMPLING_RULES)
              if name in fields]
    for name, rule in rules:
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
    return SettingsValues(system_prompt=system_prompt, theme=theme, tools_enabled=tools_enabled,  # type: ignore[arg-type]
                          python_asks=python_asks, **out), {}


# The sampling section's further fields (checked only when the form has them).
SAMPLING_RULES: tuple[tuple[str, Callable[[str], float]], ...] = (
    ("min_p", min_p), ("repetition_penalty", repetition_penalty),
    ("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty),
    ("penalty_window", penalty_window), ("seed", seed),
)
