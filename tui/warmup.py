"""Libraries the first turn needs, imported in a thread once the app is up.

Start-up leaves them out (the first frame does not need them), but the first message does:
the documents layer builds a numpy index for the conversation, and importing numpy on the
UI loop at that moment froze the screen for ~100 ms. Importing it in a thread right after
the history is listed moves that cost to where the person is still reading.
"""

from __future__ import annotations

import importlib

# The documents and memory layers (Runtime.chat, made on the first turn) and numpy.
FIRST_TURN_MODULES = ("core.runtime.context", "numpy")


def warm_imports() -> None:
    for name in FIRST_TURN_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # the feature that needs it reports that itself
            pass
