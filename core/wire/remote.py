"""The advice shown under a remote's error: plain text keyed by the error's code."""

from __future__ import annotations

# What a person can do when a remote fails, by error code. A local model's advice ("the
# model process restarts by itself") is not true of a server across the network: the
# chat shows these under a remote's errors instead (issue 32).
REMOTE_HINTS = {
    "WORKER_CRASHED": "Check that the remote is running and reachable (its URL is in settings, "
                      "[[remotes]]); press r on this reply to retry.",
    "TIMEOUT": "The remote took too long: check that it is running and not overloaded; press r "
               "on this reply to retry.",
    "LOAD_FAILED": "Check the remote's URL, API key and model name in settings ([[remotes]]), or "
                   "pick another model (ctrl+p → Model).",
    "INTERNAL": "The remote failed; check its own log, then press r on this reply to retry.",
}


def remote_hint(code: str | None) -> str | None:
    """The advice shown under a remote's error (None: the general advice for the code)."""
    return REMOTE_HINTS.get(code or "")
