"""The Python sandbox: one contained process tree per conversation, run like a notebook."""

from core.tools.sandbox.client import (
    DEFAULT_SCRATCH_MB,
    MAX_LIVE,
    PROCESSES,
    RunResult,
    Sandbox,
)

__all__ = ["DEFAULT_SCRATCH_MB", "MAX_LIVE", "PROCESSES", "RunResult", "Sandbox"]
