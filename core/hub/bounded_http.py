"""Requests to the Hub that end: bounded in time, in size, and tried again with backoff.

huggingface_hub's HfApi waits forever (list_models passes no timeout), retries a hang
five times with up to 8 s between, reads an error body whole whatever its size, and
parses JSON with json.loads (RecursionError past ~1,000 levels). The two API calls
llmdeck makes (search, one repo's info) go through `get_json` instead: huggingface_hub's
shared session, headers, error mapping (hf_raise_for_status) and ModelInfo, with
llmdeck's bounds around them. `head` does the same for the file metadata call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from core import json_text
from core.hub.auth import get_token
from core.hub.errors import HubError
from core.hub.timeouts import STALL_MIN_BYTES, HubTimeouts, hub_timeouts

MAX_API_BYTES = 64 << 20  # a listing of a repo with 100,000 files is ~20 MB
MAX_ERROR_BYTES = 64 << 10  # an error body is read for its message only
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
T = TypeVar("T")


class StallWatch:
    """Fails a transfer that got less than STALL_MIN_BYTES over the last `stall_s` seconds.

    A socket read timeout catches silence; a trickle of a byte a second passes it for
    ever, so progress is judged over a window instead. `stalled_for` feeds the screen.
    """

    def __init__(self, stall_s: float, what: str, clock: Callable[[], float] = time.monotonic):
        self.stall_s, self.what, self.clock = stall_s, what, clock
        self._mark_time = clock()
        self._mark_bytes = 0
        self.total = 0

    def feed(self, n: int) -> None:
        self.total += n
        now = self.clock()
        if self.total - self._mark_bytes >= STALL_MIN_BYTES:
            self._mark_time, self._mark_bytes = now, self.total
        elif now - self._mark_time > self.stall_s:
            raise stall_error(self.what, self.stall_s)

    def stalled_for(self) -> float:
        return self.clock() - self._mark_time


def stall_error(what: str, seconds: float) -> HubError:
    return HubError("TIMEOUT", f"The Hub stopped sending {what}: no data for {seconds:g} s "
                    "(stall timeout). Pull again to resume where it stopped, or raise "
                    "LLMDECK_HUB_STALL_TIMEOUT on a slow link.")


def timeout_error(exc: BaseException, what: str, t: HubTimeouts, started: bool = False) -> HubError:
    """The sentence for an httpx timeout: which bound ran out, for what."""
    import httpx2

    if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
        return HubError("TIMEOUT", f"Could not connect to the Hub for {what} within "
                        f"{t.connect_s:g} s (connect timeout); check the network, proxy "
                        "or HF_ENDPOINT.")
    if started:
        return stall_error(what, t.stall_s)
    return HubError("TIMEOUT", f"The Hub accepted the request for {what} but sent no answer "
                    f"within {t.first_byte_s:g} s (first-byte timeout); try again later or "
                    "raise LLMDECK_HUB_FIRST_BYTE_TIMEOUT.")


def retryable(exc: BaseException) -> bool:
    """A failure another try may cure: the link, a timeout, 408/429/5xx."""
    import httpx2
    from huggingface_hub import errors as hf

    if isinstance(exc, HubError):
        return exc.code == "TIMEOUT"
    if isinstance(exc, httpx2.TimeoutException | httpx2.NetworkError | httpx2.RemoteProtocolError):
        return True
    if isinstance(exc, hf.HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code in RETRY_STATUSES
    return False


def with_retries(call: Callable[[], T], what: str, t: HubTimeouts | None = None,
                 cancelled: Callable[[], bool] = lambda: False) -> T:
    """`call()` tried 1 + t.retries times with exponential backoff on retryable failures.

    Timeouts come back as HubError TIMEOUT with their sentence; anything else is raised
    as it is, for errors.classify.
    """
    import httpx2

    t = t or hub_timeouts()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retryable(exc) or attempt >= t.retries or cancelled():
                if isinstance(exc, httpx2.TimeoutException):
                    raise timeout_error(exc, what, t) from exc
                raise
            attempt += 1
            time.sleep(t.wait_before(attempt))


def _auth(token: str | None) -> str | bool:
    return token or get_token() or False


def get_json(url: str, *, what: str, params: dict[str, Any] | None = None,
             token: str | None = None, max_bytes: int = MAX_API_BYTES) -> Any:
    """GET an API answer and parse it; every way it fails is a HubError or an hf error."""
    t = hub_timeouts()
    return with_retries(lambda: _get_json_once(url, what, params, token, max_bytes, t), what, t)


def _get_json_once(url: str, what: str, params: dict[str, Any] | None, token: str | None,
                   max_bytes: int, t: HubTimeouts) -> Any:
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(token=_auth(token))
    with get_session().stream("GET", url, params=params, headers=headers,
                              timeout=t.httpx()) as response:
        t.body_started(response)
        ok = response.status_code < 400
        cap = max_bytes if ok else MAX_ERROR_BYTES
        body = bytearray()
        watch = StallWatch(t.stall_s, what)
        try:
            for chunk in response.iter_bytes():  # decoded: a gzip bomb counts as it grows
                body += chunk
                watch.feed(len(chunk))
                if len(body) > cap:
                    if ok:
                        raise HubError("HTTP", f"The Hub's answer for {what} passed "
                                       f"{cap >> 20} MiB; llmdeck stopped reading it. Check "
                                       "HF_ENDPOINT (a proxy or mirror may be misbehaving).")
                    break
        except httpx2.TimeoutException as exc:
            raise timeout_error(exc, what, t, started=True) from exc
        kept = {k: v for k, v in response.headers.items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")}
        whole = httpx2.Response(response.status_code, headers=kept,
                                content=bytes(body[:cap]), request=response.request)
    hf_raise_for_status(whole)
    return json_text.loads(bytes(body))


def head(url: str, *, what: str, token: str | None = None, endpoint: str | None = None,
         cancelled: Callable[[], bool] = lambda: False) -> Any:
    """huggingface_hub's file metadata call (HEAD), bounded in time and retried."""
    from huggingface_hub import get_hf_file_metadata

    t = hub_timeouts()
    return with_retries(lambda: get_hf_file_metadata(url, token=_auth(token), timeout=t.httpx(),
                                                     endpoint=endpoint), what, t, cancelled)
