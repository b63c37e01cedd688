"""The huggingface_hub client as llmdeck uses it: endpoint and token resolved per call.

huggingface_hub reads HF_ENDPOINT once at import; resolving it per call lets a process
(and its tests) point at another Hub without re-importing anything.
"""

from __future__ import annotations

import os

from core.hub.auth import get_token


def endpoint() -> str:
    """The Hub origin: HF_ENDPOINT when set, else huggingface_hub's default."""
    value = os.environ.get("HF_ENDPOINT")
    if value:
        return value.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT


def api(token: str | None = None):  # -> HfApi, imported lazily (heavy module)
    """An HfApi bound to the current endpoint and the user's token."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=token or get_token() or False)
