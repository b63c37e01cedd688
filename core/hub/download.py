"""Downloads into the Hugging Face cache: resumable, verified, cancellable, with progress.

huggingface_hub 2.x downloads each attempt into a fresh temporary file and deletes it on
failure, so a killed app would start a 20 GB pull from zero. llmdeck keeps the partial
file instead and resumes it with a Range request, still through huggingface_hub's own
metadata call (HEAD), HTTP session, headers and error mapping. Every file is checked
against the hash the Hub announces (sha256 for LFS files, the git blob id otherwise); a
mismatch is downloaded once more from scratch and then reported, never linked into the
cache. A file the Hub gave no hash for is kept under its own sha256 and marked
unverified (the result, the progress and the registry say so), never silently whole.

The Hub's answers are data: every name is checked by core.hub.cache_layout before a path
is built from it, a body is never written past the size announced, and every network
read is bounded in time (core.hub.timeouts), each limit named in the error it gives.

`download_plan` blocks and is meant for a thread; `DownloadJob` (core.hub.download_job)
runs it in one and turns its progress into an async iterator for an event loop.
"""

from __future__ import annotations

import hashlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from core import paths
from core.hub import bounded_http
from core.hub import cache_layout as layout
from core.hub.auth import get_token
from core.hub.bounded_http import StallWatch, timeout_error
from core.hub.endpoint import endpoint
from core.hub.errors import HubError, classify
from core.hub.listing import DownloadPlan, PlannedFile, list_files, plan_download
from core.hub.runnable import human_bytes
from core.hub.safe_names import check_commit, check_etag, check_repo_path, is_hash_etag
from core.hub.timeouts import HubTimeouts, hub_timeouts
from core.terminal_text import visible
from core.wire.hub import DownloadProgress, State  # noqa: F401  (the hub's names)

log = logging.getLogger("llmdeck.hub")

# None: write bytes as the socket delivers them (reads of up to 64 KiB), so a crash loses
# at most what was in flight, and cancel reacts within one read.
CHUNK_SIZE: int | None = None
PROGRESS_INTERVAL_S = 0.1
CANCEL_GRACE_S = 0.3  # how long a cancel waits for the thread's own, exact, last word

@dataclass(frozen=True, slots=True)
class DownloadResult:
    plan: DownloadPlan
    path: Path | None
    error: HubError | None
    bytes_fetched: int  # bytes received over the network by this call
    unverified: tuple[str, ...] = ()  # files kept without a hash from the Hub to check

    @property
    def ok(self) -> bool:
        return self.error is None


class CancelToken:
    """Set from any thread; the download stops at its next chunk and keeps its bytes.

    A read blocked on a silent Hub has no next chunk: `interrupts` registers a way to
    wake it (shutting its socket down), run at once by `cancel`.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            try:
                hook()
            except OSError:  # already closed: nothing left to wake
                pass

    @contextmanager
    def interrupts(self, hook: Callable[[], None]) -> Iterator[None]:
        """Run `hook` on cancel while the block runs (at once if cancelled already)."""
        with self._lock:
            self._hooks.append(hook)
        try:
            if self.cancelled:
                hook()
            yield
        finally:
            with self._lock:
                self._hooks.remove(hook)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class _Cancelled(Exception):
    pass


@dataclass
class _Meter:
    """Progress bookkeeping over a whole plan, throttled to a few events a second."""

    plan: DownloadPlan
    emit: Callable[[DownloadProgress], None] | None
    done_bytes: int = 0
    fetched: int = 0
    file_index: int = 0
    filename: str = ""
    watch: StallWatch | None = None  # the transfer running now, for the stall notice
    unverified: list[str] = field(default_factory=list)
    stall_notice_s: float = 5.0
    _last_emit: float = 0.0
    _window: list[tuple[float, int]] = field(default_factory=list)

    def rate(self) -> float:
        now = time.monotonic()
        self._window = [(t, b) for t, b in self._window if now - t <= 2.0]
        if len(self._window) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._window[0], self._window[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def advance(self, n: int, fetched: bool = True) -> None:
        self.done_bytes += n
        if fetched:
            self.fetched += n
        self._window.append((time.monotonic(), self.fetched))
        if time.monotonic() - self._last_emit >= PROGRESS_INTERVAL_S:
            self.send("downloading")

    def rewind(self, n: int) -> None:
        self.done_bytes -= n

    def send(self, state: State, error: HubError | None = None, path: str | None = None) -> None:
        self._last_emit = time.monotonic()
        if self.emit is None:
            return
        rate = self.rate()
        left = self.plan.total_bytes - self.done_bytes
        eta = left / rate if rate > 0 else None
        stalled = self.watch.stalled_for() if self.watch is not None else None
        self.emit(DownloadProgress(
            repo_id=self.plan.repo_id, filename=self.filename, file_index=self.file_index,
            file_count=len(self.plan.files), downloaded=self.done_bytes,
            total=self.plan.total_bytes, rate_bps=rate, eta_s=eta, state=state, error=error,
            path=path,
            stalled_s=stalled if stalled is not None and stalled >= self.stall_notice_s
            and state == "downloading" else None,
            unverified=tuple(self.unverified),
        ))


def _hasher_for(expected: str, size: int) -> Any:
    """The hash `expected` is: sha256 (LFS files) or a git blob sha1 (all others)."""
    if len(expected) == 64:
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b"blob %d\0" % size)
    return h


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.netloc) == (pb.scheme, pb.netloc)


def check_free_space(plan: DownloadPlan, cache: Path) -> None:
    """Raise DISK_FULL before any byte moves when what is left to fetch will not fit."""
    needed = 0
    for f in plan.files:
        known = f.expected_hash
        if known and layout.blob_path(cache, plan.repo_id, known).exists():
            continue
        partial = layout.partial_path(cache, plan.repo_id, known) if known else None
        have = partial.stat().st_size if partial and partial.exists() else 0
        needed += max(f.size - have, 0)
    free = layout.free_bytes(layout.repo_dir(cache, plan.repo_id))
    if needed > free:
        raise HubError(
            "DISK_FULL",
            f"{plan.repo_id} needs {human_bytes(needed)} more but only {human_bytes(free)} "
            f"is free under {cache}; free some space or set LLMDECK_HOME/HF_HOME to a "
            "larger disk.",
        )


def download_plan(plan: DownloadPlan, *, cache_dir: Path | None = None,
                  token: str | None = None,
                  on_progress: Callable[[DownloadProgress], None] | None = None,
                  cancel: CancelToken | None = None,
                  chunk_size: int | None = CHUNK_SIZE) -> DownloadResult:
    """Fetch every file of `plan` into the cache; blocking, returns a result (no raise)."""
    cache = Path(cache_dir) if cache_dir is not None else paths.hf_cache_dir()
    token = token or get_token()
    meter = _Meter(plan, on_progress, stall_notice_s=hub_timeouts().stall_notice_s)
    cancel = cancel or CancelToken()
    try:
        check_free_space(plan, cache)
        meter.send("queued")
        for index, f in enumerate(plan.files):
            if cancel.cancelled:
                raise _Cancelled()
            meter.file_index, meter.filename = index, f.path
            meter.send("downloading")  # every file start and end is shown, however fast
            _fetch_file(plan, f, cache, token, meter, cancel, chunk_size)
            meter.send("downloading")
        layout.write_ref(cache, plan.repo_id, plan.ref, plan.revision)
        snap = layout.snapshot_dir(cache, plan.repo_id, plan.revision)
        path = snap / plan.primary if plan.primary else snap
        meter.send("done", path=str(path))
        log.info("downloaded %s (%s)", plan.repo_id, human_bytes(plan.total_bytes))
        return DownloadResult(plan, path, None, meter.fetched, tuple(meter.unverified))
    except _Cancelled:
        err = HubError("CANCELLED", f"Download of {plan.repo_id} cancelled; pull it again to "
                       "resume where it stopped.")
        meter.send("cancelled", error=err)
        return DownloadResult(plan, None, err, meter.fetched)
    except Exception as exc:  # every failure is reported as a value
        err = classify(exc, plan.repo_id, meter.filename)
        log.warning("download of %s failed: %s", plan.repo_id, err.code)
        meter.send("error", error=err)
        return DownloadResult(plan, None, err, meter.fetched)


def _fetch_file(plan: DownloadPlan, f: PlannedFile, cache: Path, token: str | None,
                meter: _Meter, cancel: CancelToken, chunk_size: int | None) -> None:
    from filelock import FileLock, Timeout
    from huggingface_hub import hf_hub_url

    what = f"{plan.repo_id}/{check_repo_path(f.path)}"
    check_commit(plan.revision)
    url = hf_hub_url(plan.repo_id, f.path, revision=plan.revision, endpoint=endpoint())
    meta = bounded_http.head(url, what=visible(what), token=token, endpoint=endpoint(),
                             cancelled=lambda: cancel.cancelled)
    target = _checked_target(plan, f, meta, what)
    key = target.hash or _unverified_key(plan, f)
    if _have_blob(cache, plan.repo_id, target):
        meter.advance(target.size, fetched=False)
        layout.link_snapshot(cache, plan.repo_id, plan.revision, f.path, key)
        return
    lock_file = layout.make_parent(cache, layout.lock_path(cache, plan.repo_id, key))
    layout.make_parent(cache, layout.partial_path(cache, plan.repo_id, key))
    lock = FileLock(str(lock_file))
    while True:  # wait for another pull of the same blob, but stay cancellable
        try:
            lock.acquire(timeout=0.25)
            break
        except Timeout:
            if cancel.cancelled:
                raise _Cancelled() from None
    try:
        if _have_blob(cache, plan.repo_id, target):  # the other pull finished it
            meter.advance(target.size, fetched=False)
            name = key
        else:
            name = _download_verified(meta.location, plan, f.path, key, target, cache, token,
                                      meter, cancel, chunk_size)
        layout.link_snapshot(cache, plan.repo_id, plan.revision, f.path, name)
    finally:
        lock.release()


def _have_blob(cache: Path, repo_id: str, target: _Target) -> bool:
    """Whether the blob the Hub's hash names is already whole in the cache.

    One kept earlier as unverified (the Hub gave no hash then) is hashed now that there is
    one to check: it loses its mark if it matches, and is fetched again if not.
    """
    if target.hash is None:
        return False
    blob = layout.blob_path(cache, repo_id, target.hash)
    if not blob.is_file() or blob.stat().st_size != target.size:
        return False
    marker = layout.unverified_marker(cache, repo_id, target.hash)
    if marker.exists():
        hasher = _hasher_for(target.hash, target.size)
        _hash_existing(blob, target.size, hasher)
        if hasher.hexdigest() != target.hash:
            return False
        marker.unlink()
    return True


@dataclass(frozen=True, slots=True)
class _Target:
    """What the file must be: its size, and the hash to check (None: none was offered)."""

    size: int
    hash: str | None


def _checked_target(plan: DownloadPlan, f: PlannedFile, meta: Any, what: str) -> _Target:
    """The size and hash a file must have, from the listing and the HEAD answer together.

    Both are the Hub's word; where both speak they must agree. The commit a HEAD names
    must be the listing's. An etag that is no sha256 or git sha1 is not a hash: it is
    never a file name, and unless the listing gave a hash the file is downloaded as
    unverified (named by its own sha256, marked, shown as such), never silently trusted.
    """
    shown = visible(what)
    if meta.commit_hash is not None and check_commit(meta.commit_hash) != plan.revision:
        raise HubError("UNSAFE", f"The Hub's listing of {plan.repo_id} is at commit "
                       f"{plan.revision[:12]} but {shown} came from {meta.commit_hash[:12]}; "
                       "nothing was written. Pull again.")
    raw = meta.etag if isinstance(meta.etag, str) else None
    etag = raw if raw and is_hash_etag(raw) else None
    if raw and etag is None and not _OPAQUE_ETAG.fullmatch(raw):
        check_etag(raw)  # a name-like etag ('../x', '/x', control characters): refused
    expected = f.expected_hash
    if expected and etag and etag != expected:
        raise HubError("UNSAFE", f"The Hub's file list and its download headers give {shown} "
                       "different hashes; nothing was written. Check HF_ENDPOINT.")
    size = meta.size if isinstance(meta.size, int) and meta.size >= 0 else None
    if size is not None and f.size and size != f.size:
        raise HubError("UNSAFE", f"The Hub's file list says {shown} has {f.size} bytes but its "
                       f"headers say {size}; nothing was written. Check HF_ENDPOINT.")
    if size is None:
        size = f.size
    if not size and not (expected or etag):
        raise HubError("UNSAFE", f"The Hub said neither the size nor a hash of {shown}; "
                       "llmdeck cannot tell a whole file from a broken one.")
    return _Target(size, expected or etag)


# An etag that is no hash but harmless (a CDN's version tag): it proves nothing, so the
# file is unverified unless the listing gave a hash; anything else is refused.
_OPAQUE_ETAG = re.compile(r"[A-Za-z0-9_+=:-]{1,128}")


def _unverified_key(plan: DownloadPlan, f: PlannedFile) -> str:
    """A hash-shaped name for the partial and lock of a file the Hub gave no hash for."""
    return hashlib.sha256(f"unverified\0{plan.repo_id}\0{plan.revision}\0{f.path}"
                          .encode()).hexdigest()


def _download_verified(location: str, plan: DownloadPlan, filename: str, key: str,
                       target: _Target, cache: Path, token: str | None, meter: _Meter,
                       cancel: CancelToken, chunk_size: int | None) -> str:
    """Resume or start the partial file, check its hash, re-fetch once if it is wrong.

    Returns the blob's name: the hash the Hub gave, or for an unverified file the
    sha256 of what arrived, marked unverified beside the blob.
    """
    partial = layout.partial_path(cache, plan.repo_id, key)
    size = target.size
    for attempt in (1, 2):
        hasher = _hasher_for(target.hash, size) if target.hash else hashlib.sha256()
        try:
            digest = _fill_partial(location, partial, size, hasher, token, meter, cancel,
                                   chunk_size, f"{plan.repo_id}/{filename}")
        except _Overrun as over:
            partial.unlink(missing_ok=True)
            raise HubError("UNSAFE", f"The Hub sent more than the {size} bytes it announced for "
                           f"{visible(plan.repo_id + '/' + filename)} ({over}); llmdeck stopped "
                           "reading and kept nothing.") from None
        meter.send("verifying")
        if target.hash is None:
            blob = layout.make_parent(cache, layout.blob_path(cache, plan.repo_id, digest))
            layout.unverified_marker(cache, plan.repo_id, digest).touch()
            partial.replace(blob)
            meter.unverified.append(filename)
            log.warning("%s/%s: the Hub gave no hash; kept as unverified", plan.repo_id,
                        filename)
            return digest
        if digest == target.hash:
            blob = layout.make_parent(cache, layout.blob_path(cache, plan.repo_id, digest))
            partial.replace(blob)
            layout.unverified_marker(cache, plan.repo_id, digest).unlink(missing_ok=True)
            return digest
        log.warning("checksum mismatch for %s/%s (attempt %d)", plan.repo_id, filename, attempt)
        partial.unlink(missing_ok=True)
        meter.rewind(size)
    raise HubError(
        "CHECKSUM_MISMATCH",
        f"{visible(plan.repo_id + '/' + filename)} arrived corrupted twice (its hash does not "
        "match the Hub's); nothing was kept. Check the network or proxy and pull again.",
    )


def _fill_partial(location: str, partial: Path, size: int, hasher: Any, token: str | None,
                  meter: _Meter, cancel: CancelToken, chunk_size: int | None,
                  what: str) -> str:
    """Bring `partial` to exactly `size` bytes with Range requests; return its hex digest."""
    t = hub_timeouts()
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:
        partial.unlink()
        have = 0
    fresh = hasher.copy()  # the hash of nothing, for a restart
    with open(partial, "ab") as out:
        if have:
            _hash_existing(partial, have, hasher)
        meter.advance(have, fetched=False)
        failures = 0
        while have < size:
            if cancel.cancelled:
                raise _Cancelled()
            try:
                have = _stream_into(location, out, have, size, hasher, token, meter, cancel,
                                    chunk_size, what, t)
            except _RangeIgnored:
                out.seek(0)
                out.truncate()
                meter.rewind(have)
                hasher, have = fresh.copy(), 0
                continue
            except _TransientError as exc:
                have = out.tell()  # what reached the file before the link died
                failures += 1
                if failures > t.retries:
                    raise exc.error from None
                time.sleep(t.wait_before(failures))
                continue
            if have < size:  # the server closed early: resume, within the retry budget
                failures += 1
                if failures > t.retries:
                    raise HubError("OFFLINE", "The connection kept closing before "
                                   f"{visible(what)} was complete; pull again to resume.")
                time.sleep(t.wait_before(failures))
    return hasher.hexdigest()


def _hash_existing(partial: Path, n: int, hasher: Any) -> None:
    with open(partial, "rb") as f:
        left = n
        while left:
            block = f.read(min(left, 8 * 1024 * 1024))
            if not block:
                break
            hasher.update(block)
            left -= len(block)


class _TransientError(Exception):
    """A failure another try may cure; `error` is the sentence if none does."""

    def __init__(self, error: HubError) -> None:
        super().__init__(error.message)
        self.error = error


class _RangeIgnored(Exception):
    """The server answered 200 to a Range request: the partial must start over."""


class _Overrun(Exception):
    """The body ran past the size the Hub announced."""


def _stream_into(location: str, out: BinaryIO, have: int, size: int, hasher: Any,
                 token: str | None, meter: _Meter, cancel: CancelToken,
                 chunk_size: int | None, what: str, t: HubTimeouts) -> int:
    """One GET from byte `have`; appends to `out` and returns the new length.

    Never writes past `size`: a Content-Length that promises more, or a body that
    brings more, is refused at the first byte too many. Network failures come back as
    _TransientError carrying the sentence that names them (which timeout, or the link).
    """
    import httpx2

    shown = visible(what)
    started = [False]  # whether the answer began: a timeout after it is a stall
    try:
        return _get_range(location, out, have, size, hasher, token, meter, cancel, chunk_size,
                          shown, t, started)
    except (httpx2.TransportError, HubError) as exc:
        out.flush()
        if cancel.cancelled:  # the cancel woke a blocked read: not a network failure
            raise _Cancelled() from None
        if isinstance(exc, httpx2.TimeoutException):
            raise _TransientError(timeout_error(exc, shown, t, started=started[0])) from exc
        if isinstance(exc, httpx2.TransportError):
            raise _TransientError(HubError(
                "OFFLINE", f"The connection to the Hub kept dropping while fetching {shown}; "
                "pull again to resume where it stopped.")) from exc
        if exc.code == "TIMEOUT":  # a stall (a trickle): resumable like a dropped link
            raise _TransientError(exc) from None
        raise
    finally:
        meter.watch = None


def _get_range(location: str, out: BinaryIO, have: int, size: int, hasher: Any,
               token: str | None, meter: _Meter, cancel: CancelToken, chunk_size: int | None,
               shown: str, t: HubTimeouts, started: list[bool]) -> int:
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    # The token goes to the Hub only, never to a CDN the Hub redirects to.
    headers = build_hf_headers(token=token if _same_origin(location, endpoint()) else False)
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    with get_session().stream("GET", location, headers=headers, timeout=t.httpx()) as response:
        started[0] = True
        t.body_started(response)
        if response.status_code == 416 and have == size:
            return have
        if response.status_code >= 400:
            try:
                _raise_bounded(response, hf_raise_for_status)
            except Exception as exc:
                if bounded_http.retryable(exc):  # 408, 429, 5xx: try again, resuming
                    raise _TransientError(classify(exc, shown)) from exc
                raise
        if have and response.status_code == 200:
            raise _RangeIgnored()
        if response.status_code == 206 and not _range_starts_at(response, have):
            raise _RangeIgnored()
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and have + int(length) > size:
            raise _Overrun(f"its answer announced {have + int(length)}")
        watch = meter.watch = StallWatch(t.stall_s, shown)
        sock = _socket_of(response)
        wake = cancel.interrupts(lambda: sock.shutdown(socket.SHUT_RDWR)) if sock \
            else nullcontext()
        with wake:
            for chunk in response.iter_bytes(chunk_size):
                if have + len(chunk) > size:
                    raise _Overrun(f"at least {have + len(chunk)} arrived")
                out.write(chunk)
                hasher.update(chunk)
                have += len(chunk)
                meter.advance(len(chunk))
                if cancel.cancelled:
                    out.flush()
                    raise _Cancelled()
                watch.feed(len(chunk))
        out.flush()
        if cancel.cancelled:
            raise _Cancelled()
        return have


def _socket_of(response: Any) -> socket.socket | None:
    """The socket under an httpx response (httpcore's network_stream extension), if any."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _range_starts_at(response: Any, have: int) -> bool:
    """Whether a 206 answer's Content-Range starts where the partial file ends."""
    value = response.headers.get("Content-Range", "")
    head = value.removeprefix("bytes ").split("-", 1)[0]
    return head.isdigit() and int(head) == have


def _raise_bounded(response: Any, raise_for_status: Callable[[Any], None]) -> None:
    """huggingface_hub's error for a failed GET, from at most 64 KiB of its body."""
    import httpx2

    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > bounded_http.MAX_ERROR_BYTES:
            break
    kept = {k: v for k, v in response.headers.items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")}
    raise_for_status(httpx2.Response(response.status_code, headers=kept,
                                     content=bytes(body[:bounded_http.MAX_ERROR_BYTES]),
                                     request=response.request))
    raise HubError("HTTP", f"The Hub answered {response.status_code}.")


def pull(repo_id: str, filename: str | None = None, *, revision: str | None = None,
         cache_dir: Path | None = None, token: str | None = None,
         on_progress: Callable[[DownloadProgress], None] | None = None,
         cancel: CancelToken | None = None, include_mmproj: bool = True,
         chunk_size: int | None = CHUNK_SIZE) -> DownloadResult:
    """List, plan and download in one blocking call (the CLI's `models pull`)."""
    try:
        listing = list_files(repo_id, revision, token)
        plan = plan_download(listing, filename, include_mmproj=include_mmproj)
    except HubError as err:
        empty = DownloadPlan(repo_id, revision or "main", "gguf", filename or "", ())
        if on_progress:
            on_progress(replace(_terminal(empty), error=err))
        return DownloadResult(empty, None, err, 0)
    return download_plan(plan, cache_dir=cache_dir, token=token, on_progress=on_progress,
                         cancel=cancel, chunk_size=chunk_size)


def _terminal(plan: DownloadPlan) -> DownloadProgress:
    return DownloadProgress(plan.repo_id, plan.primary, 0, 0, 0, 0, 0.0, None, "error")
