"""A person's turn first in prefill across a model's replicas (issue 45 item 3).

Replicas of one model share the machine's cores (or its GPU): while a person's turn is
prefilled on one worker, the others' API replies slow it down. So the others that run
only API replies and run one reply at a time (engines that preempt: llama.cpp) hold their
steps until the turn's first token, at most HOLD_S: an API reply waits a moment between
two tokens, the person gets the whole machine. Workers running a person's turn are
never held.
"""

from __future__ import annotations

from typing import Any

from core.workers import protocol as p

HOLD_S = 2.0  # the longest a hold lasts, whatever happens to the turn


def hold_others(worker: Any) -> list[Any]:
    """Ask the model's other workers to hold (the turn goes to `worker`); those asked."""
    held = []
    for other in worker.group.workers:
        if other is worker or other.state != "ready" or not other.info.get("preempts"):
            continue
        requests = [s.request for s in other.streams.values()]
        if not requests or any(r is not None and r.interactive for r in requests):
            continue
        try:
            other.send((p.HOLD, HOLD_S))
        except (OSError, ValueError):
            continue
        held.append(other)
    return held


def release(held: list[Any]) -> None:
    """End the holds (the turn's first token came, or it ended)."""
    for other in held:
        if other.state == "ready":
            try:
                other.send((p.HOLD, 0))
            except (OSError, ValueError):
                pass
