"""Where the Hub is: the one fact both the client and the error wording need.

It sits below core.hub.client and core.hub.errors so that neither reaches up into the
other for it. huggingface_hub reads HF_ENDPOINT once at import; resolving it per call
lets a process (and its tests) point at another Hub without re-importing anything.
"""

from __future__ import annotations

import os

OFFLINE_SENTENCE = "Offline mode is on (HF_HUB_OFFLINE); unset it to search or download."


def endpoint() -> str:
    """The Hub origin: HF_ENDPOINT when set, else huggingface_hub's default."""
    value = os.environ.get("HF_ENDPOINT")
    if value:
        return value.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT


def offline_mode() -> bool:
    """True when HF_HUB_OFFLINE asks for no Hub at all (read now, as endpoint() is; the
    values huggingface_hub takes as true)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
