"""Leases: a model is never unloaded under a reply.

A request holds a lease on its model from its start (a load it waits for included) to
its stream's end. Admission never evicts a leased model, the idle watch never unloads
one, and an unload with a wait gives leased replies time to end. Whoever waits for "some
lease ended" (an admission that only busy models stand in the way of, an unload with a
wait) waits on one shared future, woken when any model's last lease ends or a load ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Leased(Protocol):
    """What holds leases: a model group (its count and when it last answered)."""

    leases: int
    last_used: float  # time.monotonic()


class Leases:
    """The lease counts' bookkeeping, and the one future waiters share."""

    def __init__(self, on_last_end: Callable[[], None]) -> None:
        self._change: asyncio.Future[None] | None = None  # woken when a lease ends
        self._on_last_end = on_last_end  # the idle watch: keep_alive 0 unloads now

    def take(self, holder: Leased | None) -> None:
        if holder is not None:
            holder.leases += 1

    def end(self, holder: Leased | None) -> None:
        if holder is None:
            return
        holder.leases -= 1
        holder.last_used = time.monotonic()
        if not holder.leases:
            self.changed()
            self._on_last_end()

    def changed(self) -> None:
        """Wake everyone waiting for a lease (or a load) to end."""
        fut, self._change = self._change, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Wait until some model's last lease ends (or a load ends); TimeoutError after
        `timeout_s`."""
        if timeout_s <= 0:
            raise TimeoutError
        if self._change is None:
            self._change = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(asyncio.shield(self._change), timeout_s)

    async def until_ended(self, holder: Leased, wait_s: float) -> bool:
        """Wait up to `wait_s` for the holder's replies to end; True when they did."""
        deadline = time.monotonic() + wait_s
        while holder.leases and time.monotonic() < deadline:
            try:
                await self.wait(deadline - time.monotonic())
            except TimeoutError:
                break
        return not holder.leases
