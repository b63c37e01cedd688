"""core.runtime: the one door into the core for every front end.

The package, one idea per module, lowest first:
- store_thread.py  the store's single writer thread (open, recover, call, call_nowait)
- models.py        model lifecycle: resolve the configured model, load, switch, remote
- recorder.py      the reply recorder: one assistant message saved as it streams
- tool_round.py    the tool round between two generations of a reply
- live.py          live turns: each started reply runs as a task; watchers are cursors
- turns.py         Turn: one reply streaming, from the parts it is handed
- context.py       context preparation: documents and memory (imported on first use)
- compare.py       one message to two models side by side (imported on first use)
- library.py       the face's calls about models on disk and on the Hub, and presets
- face.py          Runtime: the thin public calls the UI makes
- state.py         the plain answers a client reads (ModelState, SandboxInfo, context_use)
- protocol.py      RuntimeFace and TurnHandle: the face's shape, names only

The names below are the face; import them from `core.runtime`, never from a module.
The context module's names load on first use: documents and memory are ~10 ms of imports
the first frame does not need (tui.warmup imports them in a thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.runtime.state import ModelState, SandboxInfo, context_use

if TYPE_CHECKING:
    from core.runtime.compare import LEFT, RIGHT, CompareRefused, Comparison, ModelSpec, spec_for
    from core.runtime.face import Runtime
    from core.runtime.live import LiveTurnInfo, TurnWatch
    from core.runtime.models import engine_for
    from core.runtime.protocol import RuntimeFace, TurnHandle
    from core.runtime.recorder import FLUSH_S
    from core.runtime.store_thread import SIDEBAR_PAGE
    from core.runtime.turns import Turn

# The rest loads on first use: the service's client reads only the state names above,
# and the pool, tools and store below them were most of its start-up imports (issue 48).
_FROM = {"Runtime": "face", "RuntimeFace": "protocol", "TurnHandle": "protocol",
         "LiveTurnInfo": "live", "TurnWatch": "live", "engine_for": "models",
         "FLUSH_S": "recorder", "SIDEBAR_PAGE": "store_thread", "Turn": "turns",
         "LEFT": "compare", "RIGHT": "compare", "CompareRefused": "compare",
         "Comparison": "compare", "spec_for": "compare", "ModelSpec": "compare"}
_CONTEXT_NAMES = frozenset({"AttachResult", "ChatContext", "DocContext", "PreparedTurn"})

__all__ = ["FLUSH_S", "LEFT", "RIGHT", "SIDEBAR_PAGE", "CompareRefused", "Comparison",
           "LiveTurnInfo", "ModelSpec", "ModelState", "Runtime", "RuntimeFace",
           "SandboxInfo", "Turn", "TurnHandle", "TurnWatch", "context_use", "engine_for",
           "spec_for",
           *sorted(_CONTEXT_NAMES)]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _FROM:
        return getattr(importlib.import_module(f"core.runtime.{_FROM[name]}"), name)
    if name in _CONTEXT_NAMES:
        from core.runtime import context

        return getattr(context, name)
    raise AttributeError(f"module 'core.runtime' has no attribute {name!r}")
