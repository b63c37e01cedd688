"""Which pending requests prefill together next (core.engines.prefill_order decides the
grouping; this room reads BatchGenerator's prefill state to know when a group may go)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from mlx_lm.generate import BatchGenerator

from core.engines.mlx.state import Request
from core.engines.prefill_order import Waiting, next_group, padded_tokens


class Scheduling:
    """MlxEngine's prefill grouping (a base class of MlxEngine, which holds the state)."""

    _pending: deque[Request]
    _prefill_order: str
    _prefill_step: int
    _group_tokens: int
    _group_slack: float
    _batch: dict[int, Request]
    _bg: BatchGenerator
    _prefix: Any

    def _next_group(self, free: int) -> list[Request]:
        """Take the next prefill group off the pending queue (empty: not yet)."""
        pending = list(self._pending)
        if self._prefill_order == "fifo":  # every pending request at once, in order
            group = pending[:free]
        else:
            bg = self._bg
            if bg._unprocessed_sequences:
                return []
            # One group prefills at a time, except that short prompts join a long prompt
            # being prefilled chunk by chunk (at one chunk's padding) rather than wait for
            # all of it; never its last chunk, which would delay its first token.
            joining = len(bg._prompt_batch)
            if joining and self._prefill_left(bg) <= self._prefill_step:
                return []
            for act in pending:
                if act.new_tokens is None:
                    act.new_tokens = len(act.prompt) - self._prefix.match(act.prompt)
            waiting = [Waiting(act.new_tokens or 0, act.submitted, act.req.interactive)
                       for act in pending]
            limit = min(free, bg.prefill_batch_size - joining)
            chosen = next_group(waiting, limit, time.perf_counter(), self._group_tokens,
                                self._group_slack)
            if padded_tokens(waiting, chosen) > self._group_tokens and (
                joining or any(not act.generated for act in self._batch.values())
            ):
                return []
            group = [pending[i] for i in chosen]
        taken = {id(act) for act in group}
        self._pending = deque(act for act in pending if id(act) not in taken)
        return group

    @staticmethod
    def _prefill_left(bg: BatchGenerator) -> int:
        """Prompt tokens the longest row of BatchGenerator's prefill still has to go."""
        return max((sum(len(s) for s in row[0]) for row in bg._currently_processing), default=0)
