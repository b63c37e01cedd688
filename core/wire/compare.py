"""A comparison's plain data: which side an event belongs to, and why one cannot start.

The comparing itself stays in core.runtime.compare, which imports these from here.
"""

from __future__ import annotations

from dataclasses import dataclass

LEFT, RIGHT = 0, 1  # the chat model's side, the compared model's side


@dataclass(frozen=True)
class CompareRefused:
    """Why a comparison cannot start, as a sentence a person can act on."""

    message: str
