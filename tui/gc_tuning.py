"""Garbage-collector settings for a long-running Textual app.

Textual makes many short-lived objects per frame (strips, segment caches), so the cyclic
collector runs often, and each full (generation 2) collection walks every live object:
with the modules, stylesheet and widgets of a started app that took 100-150 ms, a frozen
screen in the middle of a stream. After start-up we freeze what is alive (it lives as long
as the app; the collector stops walking it) and make young collections rarer, so a full
collection is both rarer and a walk over the objects made since.

During start-up itself (imports, stylesheet, first screen: nearly all of it stays alive)
the `llmdeck` command lets only young collections run: the one full collection there cost
~23 ms of a ~300 ms start and found next to nothing. Young ones still free start-up's
garbage (turning the collector off instead would leave ~20,000 dead objects to be frozen).
"""

from __future__ import annotations

import gc

# Young-generation threshold: CPython's default (700) runs a collection every few frames.
GEN0_THRESHOLD = 10_000
# Generation-2 threshold while starting: high enough that no full collection runs.
START_GEN2_THRESHOLD = 1_000_000


_saved: tuple[int, int, int] | None = None


def _save() -> tuple[int, int, int]:
    global _saved
    if _saved is None:
        _saved = gc.get_threshold()
    return _saved


def pause_full_collections() -> None:
    """Call first thing when the app starts (tui.cli); settle_after_start ends it."""
    saved = _save()
    gc.set_threshold(saved[0], saved[1], START_GEN2_THRESHOLD)


def settle_after_start() -> None:
    """Call once the app is up (first screen painted, history listed)."""
    saved = _save()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, saved[1], saved[2])


def restore() -> None:
    """Call when the app ends: what was frozen becomes collectable again (a test process
    runs many apps one after another)."""
    global _saved
    gc.unfreeze()
    if _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
