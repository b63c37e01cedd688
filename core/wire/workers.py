"""The rows F4, `llmdeck workers`, the hub and the API read about loaded models.

Plain dataclasses in a module of their own, so the vision and documents workers (and the
status file's reader) can describe themselves without importing the pool.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WorkerStatus:
    """A cheap snapshot of one worker for the status pane and `llmdeck workers`."""

    worker_id: str
    model: str
    engine: str
    state: str  # loading | ready | busy | crashed | idle | failed
    pid: int | None
    rss_bytes: int
    active: int
    queued: int
    tokens_per_s: float
    restarts: int
    error: str | None = None
    memory_bytes: int = 0  # its share of what admission counts for its model (memory_budget)
    last_used: float = 0.0  # wall-clock time its model's last reply ended (0: not a pool model)
    idle_left_s: float | None = None  # until its model unloads when idle (None: kept / not known)
    path: str = ""  # its model's file or folder (the hub marks loaded models by it)
    threads: int = 0  # CPU threads its engine runs (llama.cpp: its share of the cores); 0: n/a


@dataclass(slots=True)
class ModelStatus:
    """One model the pool holds, for F4, the hub's Local models and the API's lists."""

    key: str
    label: str
    engine: str
    path: str
    state: str  # loading | idle | busy | failed
    memory_bytes: int  # what admission counts for it (weights + KV cache at its context)
    rss_bytes: int  # its workers' resident memory now
    requests: int  # replies running on it or waiting for it (its leases)
    last_used: float  # wall-clock time (time.time()) its last reply ended, or it loaded
    idle_left_s: float | None  # seconds until it unloads when idle; None: kept loaded
    error: str | None = None
