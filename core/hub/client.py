"""Whether the Hub can be reached at all, asked before a search or a listing.

The requests themselves go through core.hub.bounded_http (huggingface_hub's session,
bounded in time and size).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from core.hub.endpoint import OFFLINE_SENTENCE, endpoint
from core.hub.errors import HubError

PROBE_TIMEOUT_S = 3.0


def ensure_reachable() -> None:
    """Fail fast with OFFLINE when the Hub's host does not accept a connection.

    huggingface_hub retries a dead link with backoff for about 25 seconds before it gives
    up; a keyboard user deserves the answer in a few. Skipped behind a proxy, where a
    direct connection says nothing.
    """
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                                        "http_proxy", "ALL_PROXY", "all_proxy")):
        return
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise HubError("OFFLINE", OFFLINE_SENTENCE)
    url = urlsplit(endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise HubError(
            "OFFLINE",
            f"Cannot reach {endpoint()} ({exc.strerror or type(exc).__name__}); check the "
            "network connection, proxy settings or HF_ENDPOINT.",
        ) from exc
