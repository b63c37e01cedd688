"""The runtime's plain answers the UI reads on every start: the model's state, the
sandbox's description, the context a conversation fills.

Kept apart from the modules that run things (models, face) so that a front end which
only reads them, the engine service's client, starts without importing the pool, the
tools and the store's recovery (issue 48: `llmdeck` imported all of core.runtime before
its first frame).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.store import Message

SIDEBAR_PAGE = 200  # conversations the sidebar lists (newest first)


@dataclass
class ModelState:
    """What the UI shows about the active model."""

    label: str = "no model"  # a local model's one id (core.model_ids), else what names it
    state: str = "idle"  # idle | provisioning | loading | ready | failed (a client also:
    # connecting; reconnecting or stopped while it has no service)
    error: str | None = None
    context_size: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the display name beside the id ("Gemma 3 270M (Q4_K_M, bundled)")
    bundled: bool = False  # the bundled Gemma (the empty chat speaks of it only then)


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """The Python sandbox as the settings screen describes it."""

    processes: int  # per conversation's sandbox
    max_live: int  # conversations that keep theirs alive at once
    unwalled: str | None  # why code would run with the person's full rights; None: walled
    running: bool  # a sandbox process is up (memory limits then apply from its next start)


def context_use(messages: list[Message]) -> int:
    """Tokens the conversation fills: prompt + completion of the newest reply with usage
    (its last generation's, `context_used`, where stored: a continued reply's count is
    the whole reply's, and its prompt held the part before)."""
    for m in reversed(messages):
        if m.usage:
            if m.usage.get("context_used"):
                return int(m.usage["context_used"])
            return int(m.usage.get("prompt_tokens", 0)) + int(m.usage.get("completion_tokens", 0))
    return 0
