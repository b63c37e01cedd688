"""Validation of the settings a person types, field by field.

Each rule (core.wire.settings_rules, shared with the config file's reader) refuses a value
with a sentence that says what is allowed, so the settings screen can show the reason
next to the field the moment it is typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.wire.settings_rules import (  # noqa: F401  (the screen and tests use form.<rule>)
    MAX_CONTEXT,
    MAX_PYTHON_MEMORY_MB,
    MAX_PYTHON_SCRATCH_MB,
    MAX_PYTHON_TIMEOUT_S,
    MIN_CONTEXT,
    MIN_PYTHON_MEMORY_MB,
    MIN_PYTHON_SCRATCH_MB,
    MIN_PYTHON_TIMEOUT_S,
    SAMPLING_RULES,
    Refused,
    context_size,
    max_tokens,
    python_memory,
    python_scratch,
    python_timeout,
    seed,
    temperature,
    top_k,
    top_p,
)


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
    python_scratch_mb: int = 256
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
                                              ("python_scratch_mb", python_scratch),
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

