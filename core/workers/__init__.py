"""Worker processes: engines run here so a crash or a slow load never touches the UI.

Every child process imports this package first, so the face below loads what it names only
when asked (PEP 562): a worker's start-up never pays for the pool or the status table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.wire.workers import WorkerStatus

__all__ = ["WorkerStatus", "workers_main"]


def __getattr__(name: str) -> Any:
    if name == "WorkerStatus":  # a plain dataclass: reading it never loads the pool
        from core.wire.workers import WorkerStatus

        return WorkerStatus
    if name == "workers_main":  # `llmdeck workers`
        from core.workers.status_file import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
