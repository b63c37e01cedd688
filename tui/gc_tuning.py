"""Garbage-collector settings for a long-running Textual app.

Textual makes many short-lived objects per frame (strips, segment caches), so the cyclic
collector runs often, and each full (generation 2) collection walks every live object:
with the modules, stylesheet and widgets of a started app that took 100-150 ms, a frozen
screen in the middle of a stream. After start-up we freeze what is alive (it lives as long
as the app; the collector stops walking it) and make young collections rarer, so a full
collection is both rarer and a walk over the objects made since.
"""

from __future__ import annotations

import gc

# Young-generation threshold: CPython's default (700) runs a collection every few frames.
GEN0_THRESHOLD = 10_000


_saved: tuple[int, int, int] | None = None


def settle_after_start() -> None:
    """Call once the app is up (first screen painted, history listed)."""
    global _saved
    if _saved is None:
        _saved = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, _saved[1], _saved[2])


def restore() -> None:
    """Call when the app ends: what was frozen becomes collectable again (a test process
    runs many apps one after another)."""
    global _saved
    gc.unfreeze()
    if _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
