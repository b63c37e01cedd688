"""How long llmdeck waits for the Hub, and how often it asks again.

huggingface_hub's own client waits forever by default (its shared httpx client has no
timeout, and list_models passes none), so a Hub, mirror or proxy that accepts a request
and never answers hung `llmdeck models search` and `pull` for good. Every read of the
network in core.hub now has three bounds, each named in the sentence a person sees:

  connect     the TCP (and TLS) connection is not made
  first byte  the request was accepted but no answer started
  stall       a download gets less than STALL_MIN_BYTES over `stall` seconds (no data at
              all, or a trickle of a byte a second, are the same thing to a person)

Idempotent requests (search, listing, HEAD, a resumable GET) are tried `retries` more
times, waiting `backoff`, then twice that, between tries. Each bound is an environment
variable, so tests make them small and a person on a slow link can make them large.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

STALL_MIN_BYTES = 1024  # less than this over the stall window is no progress


@dataclass(frozen=True, slots=True)
class HubTimeouts:
    connect_s: float = 10.0
    first_byte_s: float = 20.0
    stall_s: float = 30.0
    retries: int = 2
    backoff_s: float = 1.0
    stall_notice_s: float = 5.0  # the hub screen says "stalled" after this long

    def httpx(self):  # -> httpx2.Timeout, imported lazily (heavy module)
        """The bounds httpx enforces: connect, and a socket read until the answer starts
        (`body_started` then gives the body's reads the stall bound)."""
        import httpx2

        return httpx2.Timeout(connect=self.connect_s, read=self.first_byte_s,
                              write=self.first_byte_s, pool=self.connect_s)

    def body_started(self, response: object) -> None:
        """From here on a silent socket is a stall: give the body's reads `stall_s`.

        httpx passes the request's timeout dict down to httpcore, which reads it when
        the body starts; were that ever to change, the first-byte bound still holds.
        """
        extensions = getattr(getattr(response, "request", None), "extensions", None)
        bounds = extensions.get("timeout") if isinstance(extensions, dict) else None
        if isinstance(bounds, dict):
            bounds["read"] = self.stall_s

    def wait_before(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (1, 2, ...): exponential."""
        return self.backoff_s * (2 ** (attempt - 1))


def _number(name: str, default: float, low: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value >= low else default


def hub_timeouts() -> HubTimeouts:
    """The bounds in force now (read per call, so a test or a person can change them)."""
    d = HubTimeouts()
    return HubTimeouts(
        connect_s=_number("LLMDECK_HUB_CONNECT_TIMEOUT", d.connect_s, 0.05),
        first_byte_s=_number("LLMDECK_HUB_FIRST_BYTE_TIMEOUT", d.first_byte_s, 0.05),
        stall_s=_number("LLMDECK_HUB_STALL_TIMEOUT", d.stall_s, 0.05),
        retries=int(_number("LLMDECK_HUB_RETRIES", d.retries, 0)),
        backoff_s=_number("LLMDECK_HUB_BACKOFF", d.backoff_s, 0.0),
        stall_notice_s=_number("LLMDECK_HUB_STALL_NOTICE", d.stall_notice_s, 0.05),
    )
