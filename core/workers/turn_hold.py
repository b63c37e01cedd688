"""A person's turn first across a model's replicas (issue 45 item 3).

While a person has used the app in the last PERSON_WINDOW_S, one replica of a model that
runs one reply per worker (llama.cpp) is kept for the person's turns: API requests go to
the others, so a turn never waits for an API reply's step (its prefill cannot be cut).
With one replica there is nothing to keep; the turn sets the API reply aside instead
(core.engines.turn_order).

Replicas of one model share the machine's cores (or its GPU): while a person's turn is
prefilled on one worker, the others' API replies slow it down. So the others that run
only API replies and run one reply at a time (engines that preempt: llama.cpp) hold their
steps until the turn's first token, at most HOLD_S: an API reply waits a moment between
two tokens, the person gets the whole machine. Workers running a person's turn are
never held. The step in flight is cut short, not waited for (core.engines.llama_abort).
"""

from __future__ import annotations

from typing import Any

from core.workers import protocol as p

HOLD_S = 2.0  # the longest a hold lasts, whatever happens to the turn
PERSON_WINDOW_S = 300.0  # a person who sent a turn this recently is still there


def people_first(live: list[Any], interactive: bool, person_seen: float, now: float) -> list[Any]:
    """The workers a request may go to: with a person around and two or more one-at-a-
    time replicas, the first replica for the person's turns and the rest for the API."""
    if (len(live) < 2 or not person_seen or now - person_seen > PERSON_WINDOW_S
            or any(w.info.get("max_concurrency") != 1 for w in live)):
        return live
    kept = min(live, key=lambda w: w.replica)
    return [kept] if interactive else [w for w in live if w is not kept]


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
        other.interrupt()  # its step in flight stops now, not at its end
        held.append(other)
    return held


def interrupt_api(worker: Any) -> None:
    """A person's turn was just sent to `worker`: cut the step in flight of an API reply
    it runs (core.engines.llama_abort), so the turn is set ahead of it at once."""
    if any(s.request is not None and not s.request.interactive
           for s in worker.streams.values()):
        worker.interrupt()


def release(held: list[Any]) -> None:
    """End the holds (the turn's first token came, or it ended)."""
    for other in held:
        if other.state == "ready":
            try:
                other.send((p.HOLD, 0))
            except (OSError, ValueError):
                pass
