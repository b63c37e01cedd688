"""core.runtime: the one door into the core for every front end.

The package, one idea per module, lowest first:
- store_thread.py  the store's single writer thread (open, recover, call, call_nowait)
- models.py        model lifecycle: resolve the configured model, load, switch, remote
- recorder.py      the reply recorder: one assistant message saved as it streams
- tool_round.py    the tool round between two generations of a reply
- live.py          live turns: each started reply runs as a task; watchers are cursors
- turns.py         Turn: one reply streaming, from the parts it is handed
- context.py       context preparation: documents and memory (imported on first use)
- compare.py       one message to two models side by side (imported on first use;
                   Comparison, spec_for and ModelSpec are on the face)
- face.py          Runtime: the thin public calls the UI makes

The names below are the face; import them from `core.runtime`, never from a module.
The context module's names load on first use: documents and memory are ~10 ms of imports
the first frame does not need (tui.warmup imports them in a thread).
"""

from __future__ import annotations

from typing import Any

from core.runtime.face import Runtime, RuntimeFace, SandboxInfo, TurnHandle, context_use
from core.runtime.live import LiveTurnInfo, TurnWatch
from core.runtime.models import ModelState, engine_for
from core.runtime.recorder import FLUSH_S
from core.runtime.store_thread import SIDEBAR_PAGE
from core.runtime.turns import Turn

_CONTEXT_NAMES = frozenset({"AttachResult", "ChatContext", "DocContext", "PreparedTurn"})
_COMPARE_NAMES = frozenset({"Comparison", "ModelSpec", "spec_for"})  # the compare screen's

__all__ = ["FLUSH_S", "SIDEBAR_PAGE", "LiveTurnInfo", "ModelState", "Runtime", "RuntimeFace",
           "SandboxInfo", "Turn", "TurnHandle", "TurnWatch", "context_use", "engine_for",
           *sorted(_CONTEXT_NAMES), *sorted(_COMPARE_NAMES)]


def __getattr__(name: str) -> Any:
    if name in _CONTEXT_NAMES:
        from core.runtime import context

        return getattr(context, name)
    if name in _COMPARE_NAMES:
        from core.runtime import compare

        return getattr(compare, name)
    raise AttributeError(f"module 'core.runtime' has no attribute {name!r}")
