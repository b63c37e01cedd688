"""How settings name a remote model: "remote:<endpoint>/<model>" in settings.model.

Kept apart from the HTTP client so the Runtime can tell local from remote without
importing aiohttp at start-up.
"""

from __future__ import annotations

REMOTE_PREFIX = "remote:"


def remote_ref(model: str | None) -> tuple[str, str] | None:
    """Split "remote:<endpoint>/<model>" into (endpoint, model); None for a local model."""
    if not model or not model.startswith(REMOTE_PREFIX):
        return None
    name, _, remote_model = model[len(REMOTE_PREFIX):].partition("/")
    return (name, remote_model) if name and remote_model else None


def remote_model_string(endpoint: str, model: str) -> str:
    return f"{REMOTE_PREFIX}{endpoint}/{model}"
