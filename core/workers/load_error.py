"""The error a model load ends with: an events.Error code and a sentence for the person.

Its own module because admission (core.workers.admission) refuses loads with it and the
pool raises it for worker failures: both import it, neither imports the other.
"""

from __future__ import annotations


class WorkerLoadError(Exception):
    """A model could not be loaded; carries an events.Error code and a user sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
