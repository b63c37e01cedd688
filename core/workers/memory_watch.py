"""Memory watched while models run, not only at load (issue 45 item 4).

Admission counts one context of KV per worker when a model loads, but a batch of many
sessions and the prefix caches can grow past that, and other programs take memory too.
The service looks every WATCH_S: what the workers really hold (their RSS, beside what
admission counted for them) and what the machine has left. Under pressure (less than
`pressure_bytes` available) the workers first drop their prompt caches (MLX's prefix
cache; the disk keeps what was saved), then idle models are unloaded, least recently used
first, one per look, before the OS swaps or kills a worker; a model answering a reply is
never touched.
The last look is what F4's service line and `doctor` show.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("llmdeck.memory")
WATCH_S = 5.0
PRESSURE_FLOOR = 512 * 2**20  # below this much available, always pressure
PRESSURE_SHARE = 0.05  # ... or below this share of the machine's memory


@dataclass
class MemoryLook:
    """One look: bytes available, what the workers hold and were counted, and what went."""

    available_bytes: int = 0
    total_bytes: int = 0
    workers_rss_bytes: int = 0
    counted_bytes: int = 0
    pressure: bool = False
    unloaded: list[str] = field(default_factory=list)  # ids unloaded for memory, newest last
    trimmed: bool = False  # the workers were asked to drop their prompt caches
    at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"available_bytes": self.available_bytes, "total_bytes": self.total_bytes,
                "workers_rss_bytes": self.workers_rss_bytes, "counted_bytes": self.counted_bytes,
                "pressure": self.pressure, "unloaded": list(self.unloaded[-5:]),
                "trimmed": self.trimmed}


def pressure_bytes(total: int) -> int:
    return max(PRESSURE_FLOOR, int(total * PRESSURE_SHARE))


class MemoryWatch:
    """Looks at the pool's memory and acts under pressure; call `look` every WATCH_S."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.last = MemoryLook()
        self._next = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self._next

    async def look(self, available: int | None = None, total: int | None = None) -> MemoryLook:
        """Read the machine and the workers; under pressure unload the least recently used
        idle model. `available`/`total` (bytes) stand in for the machine's in tests."""
        import psutil

        self._next = time.monotonic() + WATCH_S
        if available is None or total is None:
            vm = psutil.virtual_memory()
            available, total = vm.available, vm.total
        workers = list(self.pool.status())
        look = MemoryLook(available, total, sum(w.rss_bytes for w in workers),
                          sum(w.memory_bytes for w in workers),
                          available < pressure_bytes(total), list(self.last.unloaded),
                          at=time.time())
        if look.pressure and not self.last.pressure:  # a new pressure: caches go first
            self.pool.trim_caches()
            look.trimmed = True
        idle = self.pool.idle_models() if look.pressure else []
        if idle:
            key, label = idle[0]
            log.warning("memory low (%d MiB available): unloading idle model %s",
                        available // 2**20, label)
            await self.pool.release(key)
            look.unloaded.append(label)
        self.last = look
        return look
