"""How long a model stays loaded once idle, written as Ollama writes it.

Ollama's `keep_alive` (per request, and our per-model defaults in config.toml) is a
number of seconds or a Go duration ("5m", "1h30m", "10s"): 0 unloads the model as soon
as its reply ends, a negative value keeps it loaded for ever. `parse` turns any of
these into seconds (None: for ever) or says, in a sentence, what it expected.
"""

from __future__ import annotations

import math
import re

FOREVER_S = 10 * 365 * 86400  # beyond this a keep-alive is "for ever"
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
EXPECTED = ("a number of seconds or a duration like \"5m\", \"1h30m\" or \"10s\" "
            "(0 unloads after the reply, -1 keeps the model loaded)")


class KeepAliveError(ValueError):
    """A keep_alive value we cannot read; the message says what is expected."""


def parse(value: object) -> float | None:
    """Seconds to keep an idle model loaded, or None for ever (a negative value)."""
    if isinstance(value, bool) or value is None:
        raise KeepAliveError(f"keep_alive must be {EXPECTED}.")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration(value.strip())
    else:
        raise KeepAliveError(f"keep_alive must be {EXPECTED}.")
    if math.isnan(seconds):
        raise KeepAliveError(f"keep_alive must be {EXPECTED}.")
    if seconds < 0 or seconds >= FOREVER_S:
        return None
    return seconds


def _duration(text: str) -> float:
    if len(text) > 40:
        raise KeepAliveError(f"keep_alive must be {EXPECTED}.")
    try:
        return float(text)  # "300", "-1"
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    total, at = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != at:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    if not body or at != len(body):
        raise KeepAliveError(f"keep_alive {text[:40]!r} is not {EXPECTED}.")
    return sign * total


def describe(seconds: float | None) -> str:
    """'for ever', 'after the reply', '5 min', '45 s' (for the TUI and the API's lists)."""
    if seconds is None:
        return "for ever"
    if seconds <= 0:
        return "after the reply"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
