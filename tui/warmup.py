"""Libraries the first turn needs, imported in a thread once the app is up.

Start-up leaves them out (the first frame does not need them), but the first message does:
the documents layer builds a numpy index for the conversation, and importing numpy on the
UI loop at that moment froze the screen for ~100 ms. Importing it in a thread right after
the history is listed moves that cost to where the person is still reading.

Importing in a thread while the UI loop may import the same package lazily (the composer
checks `@doc(...)` mentions with core.docs) can deadlock: Python takes a submodule's lock
before it imports the parent package, so a thread importing `core.docs.attachments` while
the loop runs `core/docs/__init__.py` waits on the loop, which waits on it (CI saw
`_DeadlockError` this way). So each name is imported parents first: a thread then only
ever waits on a whole package, never while holding one of its submodules.
"""

from __future__ import annotations

import importlib

# In process: the documents and memory layers (Runtime.chat, made on the first turn) and
# numpy. The service's client runs no turn itself: it resolves mentions, shows tool
# statuses and a remote's advice with the wire types (core.wire), never the packages.
IN_PROCESS_MODULES = ("core.docs", "core.memory", "core.runtime.context", "numpy")
# After the first frame. tui.widgets.message_body is Textual's Markdown (markdown-it,
# pygments: ~33 ms) that the first message's body needs and the first frame does not.
CLIENT_MODULES = ("core.wire.docs", "core.wire.tools", "core.wire.remote",
                  "tui.widgets.message_body")


def parents_first(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]: the order that never holds a child's lock while
    waiting for its parent."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def warm_imports(modules: tuple[str, ...] = IN_PROCESS_MODULES) -> None:
    for name in modules:
        try:
            for step in parents_first(name):
                importlib.import_module(step)
        except ImportError:  # the feature that needs it reports that itself
            pass
