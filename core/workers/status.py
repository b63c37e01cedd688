"""Kept path: WorkerStatus and ModelStatus now live in core.wire.workers (they cross the
socket to the UI); the pool and the workers import them from here unchanged."""

from core.wire.workers import ModelStatus, WorkerStatus

__all__ = ["ModelStatus", "WorkerStatus"]
