"""Downloads into the Hugging Face cache: resumable, verified, cancellable, with progress.

huggingface_hub 2.x downloads each attempt into a fresh temporary file and deletes it on
failure, so a killed app would start a 20 GB pull from zero. llmdeck keeps the partial
file instead and resumes it with a Range request, still through huggingface_hub's own
metadata call (HEAD), HTTP session, headers and error mapping. Every file is checked
against the hash the Hub announces (sha256 for LFS files, the git blob id otherwise); a
mismatch is downloaded once more from scratch and then reported, never linked into the
cache.

`download_plan` blocks and is meant for a thread; `DownloadJob` runs it in one and turns
its progress into an async iterator for the UI's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Literal
from urllib.parse import urlsplit

from core import paths
from core.hub import cache_layout as layout
from core.hub.auth import get_token
from core.hub.endpoint import endpoint
from core.hub.errors import HubError, classify
from core.hub.listing import DownloadPlan, PlannedFile, list_files, plan_download
from core.hub.runnable import human_bytes

log = logging.getLogger("llmdeck.hub")

# None: write bytes as the socket delivers them (reads of up to 64 KiB), so a crash loses
# at most what was in flight, and cancel reacts within one read.
CHUNK_SIZE: int | None = None
NETWORK_RETRIES = 3
PROGRESS_INTERVAL_S = 0.1

State = Literal["queued", "downloading", "verifying", "done", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """A snapshot of one download for progress bars: bytes over the whole plan."""

    repo_id: str
    filename: str
    file_index: int
    file_count: int
    downloaded: int
    total: int
    rate_bps: float
    eta_s: float | None
    state: State
    error: HubError | None = None
    path: str | None = None  # set when done: the GGUF file or the MLX directory

    @property
    def fraction(self) -> float:
        return self.downloaded / self.total if self.total else 1.0

    @property
    def finished(self) -> bool:
        return self.state in ("done", "error", "cancelled")


@dataclass(frozen=True, slots=True)
class DownloadResult:
    plan: DownloadPlan
    path: Path | None
    error: HubError | None
    bytes_fetched: int  # bytes received over the network by this call

    @property
    def ok(self) -> bool:
        return self.error is None


class CancelToken:
    """Set from any thread; the download stops at its next chunk and keeps its bytes."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

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
        self.emit(DownloadProgress(
            repo_id=self.plan.repo_id, filename=self.filename, file_index=self.file_index,
            file_count=len(self.plan.files), downloaded=self.done_bytes,
            total=self.plan.total_bytes, rate_bps=rate, eta_s=eta, state=state, error=error,
            path=path,
        ))


def _hasher_for(etag: str, size: int) -> Any:
    """The hash the etag is: sha256 (LFS) or a git blob sha1; None if neither shape."""
    if len(etag) == 64:
        return hashlib.sha256()
    if len(etag) == 40:
        h = hashlib.sha1()
        h.update(b"blob %d\0" % size)
        return h
    return None


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.netloc) == (pb.scheme, pb.netloc)


def check_free_space(plan: DownloadPlan, cache: Path) -> None:
    """Raise DISK_FULL before any byte moves when what is left to fetch will not fit."""
    needed = 0
    for f in plan.files:
        if f.sha256 and layout.blob_path(cache, plan.repo_id, f.sha256).exists():
            continue
        partial = layout.partial_path(cache, plan.repo_id, f.sha256) if f.sha256 else None
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
    meter = _Meter(plan, on_progress)
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
        return DownloadResult(plan, path, None, meter.fetched)
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
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(plan.repo_id, f.path, revision=plan.revision, endpoint=endpoint())
    meta = get_hf_file_metadata(url, token=token or False, endpoint=endpoint())
    etag = meta.etag or f.sha256
    size = meta.size if meta.size is not None else f.size
    if not etag:
        raise HubError("HTTP", f"The Hub gave no ETag for {plan.repo_id}/{f.path}.")
    commit = meta.commit_hash or plan.revision
    blob = layout.blob_path(cache, plan.repo_id, etag)
    if blob.exists() and blob.stat().st_size == size:
        meter.advance(size, fetched=False)
        layout.link_snapshot(cache, plan.repo_id, commit, f.path, etag)
        return
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock_file = layout.lock_path(cache, plan.repo_id, etag)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file))
    while True:  # wait for another pull of the same blob, but stay cancellable
        try:
            lock.acquire(timeout=0.25)
            break
        except Timeout:
            if cancel.cancelled:
                raise _Cancelled() from None
    try:
        if blob.exists() and blob.stat().st_size == size:  # the other pull finished it
            meter.advance(size, fetched=False)
        else:
            _download_verified(meta.location, plan, f.path, etag, size, cache, token, meter,
                               cancel, chunk_size)
        layout.link_snapshot(cache, plan.repo_id, commit, f.path, etag)
    finally:
        lock.release()


def _download_verified(location: str, plan: DownloadPlan, filename: str, etag: str, size: int,
                       cache: Path, token: str | None, meter: _Meter, cancel: CancelToken,
                       chunk_size: int | None) -> None:
    """Resume or start the partial file, check its hash, re-fetch once if it is wrong."""
    partial = layout.partial_path(cache, plan.repo_id, etag)
    for attempt in (1, 2):
        digest = _fill_partial(location, partial, etag, size, token, meter, cancel, chunk_size)
        meter.send("verifying")
        if digest is None or digest == etag:
            partial.replace(layout.blob_path(cache, plan.repo_id, etag))
            return
        log.warning("checksum mismatch for %s/%s (attempt %d)", plan.repo_id, filename, attempt)
        partial.unlink(missing_ok=True)
        meter.rewind(size)
    raise HubError(
        "CHECKSUM_MISMATCH",
        f"{plan.repo_id}/{filename} arrived corrupted twice (its hash does not match the "
        "Hub's); nothing was kept. Check the network or proxy and pull again.",
    )


def _fill_partial(location: str, partial: Path, etag: str, size: int, token: str | None,
                  meter: _Meter, cancel: CancelToken, chunk_size: int | None) -> str | None:
    """Bring `partial` to `size` bytes with Range requests; return its hex digest."""
    hasher = _hasher_for(etag, size)
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:
        partial.unlink()
        have = 0
    with open(partial, "ab") as out:
        if have and hasher is not None:
            _hash_existing(partial, have, hasher)
        meter.advance(have, fetched=False)
        retries = NETWORK_RETRIES
        while have < size:
            if cancel.cancelled:
                raise _Cancelled()
            try:
                have = _stream_into(location, out, have, size, hasher, token, meter, cancel,
                                    chunk_size)
            except _RangeIgnored:
                out.seek(0)
                out.truncate()
                meter.rewind(have)
                hasher, have = _hasher_for(etag, size), 0
            except _TransientError:
                have = out.tell()  # what reached the file before the link died
                retries -= 1
                if retries < 0:
                    raise HubError("OFFLINE", "The connection to the Hub kept dropping; "
                                   "pull again to resume where it stopped.") from None
                time.sleep(0.5)
                continue
            if have < size:  # the server closed early: resume, within the retry budget
                retries -= 1
                if retries < 0:
                    raise HubError("OFFLINE", "The connection kept closing before the file "
                                   "was complete; pull again to resume.")
    return hasher.hexdigest() if hasher is not None else None


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
    pass


class _RangeIgnored(Exception):
    """The server answered 200 to a Range request: the partial must start over."""


def _stream_into(location: str, out: BinaryIO, have: int, size: int, hasher: Any,
                 token: str | None, meter: _Meter, cancel: CancelToken,
                 chunk_size: int | None) -> int:
    """One GET from byte `have`; appends to `out` and returns the new length."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    # The token goes to the Hub only, never to a CDN the Hub redirects to.
    headers = build_hf_headers(token=token if _same_origin(location, endpoint()) else False)
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        with get_session().stream("GET", location, headers=headers) as response:
            if response.status_code == 416 and have == size:
                return have
            hf_raise_for_status(response)
            if have and response.status_code == 200:
                raise _RangeIgnored()
            for chunk in response.iter_bytes(chunk_size):
                out.write(chunk)
                if hasher is not None:
                    hasher.update(chunk)
                have += len(chunk)
                meter.advance(len(chunk))
                if cancel.cancelled:
                    out.flush()
                    raise _Cancelled()
            out.flush()
            return have
    except httpx2.TransportError as exc:
        out.flush()
        raise _TransientError(str(exc)) from exc


# -- asyncio side ------------------------------------------------------------------------


class DownloadJob:
    """One download running in a thread, observed from asyncio without blocking the loop.

    `async for progress in job` yields throttled DownloadProgress snapshots and ends after
    the terminal one (done, error or cancelled); `await job.wait()` gives the result.
    """

    def __init__(self, plan: DownloadPlan, *, cache_dir: Path | None = None,
                 token: str | None = None, chunk_size: int | None = CHUNK_SIZE) -> None:
        self.plan = plan
        self._cache_dir = cache_dir
        self._token = token
        self._chunk_size = chunk_size
        self._cancel = CancelToken()
        self._queue: asyncio.Queue[DownloadProgress] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[DownloadResult] | None = None
        self.latest: DownloadProgress = DownloadProgress(
            plan.repo_id, plan.primary, 0, len(plan.files), 0, plan.total_bytes, 0.0, None,
            "queued")

    def start(self) -> DownloadJob:
        """Start the worker thread; call from the event loop."""
        if self._future is not None:
            return self
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._future = self._loop.create_future()
        threading.Thread(target=self._run, name=f"hub-download:{self.plan.repo_id}",
                         daemon=True).start()
        return self

    def cancel(self) -> None:
        """Stop at the next chunk; the partial file stays for a later resume."""
        self._cancel.cancel()

    @property
    def started(self) -> bool:
        return self._future is not None

    def _emit(self, progress: DownloadProgress) -> None:
        assert self._loop is not None and self._queue is not None
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, progress)
        except RuntimeError:  # the loop closed (app quit): nobody is listening any more
            pass

    def _run(self) -> None:
        result = download_plan(self.plan, cache_dir=self._cache_dir, token=self._token,
                               on_progress=self._emit, cancel=self._cancel,
                               chunk_size=self._chunk_size)
        assert self._loop is not None and self._future is not None
        fut = self._future
        try:
            self._loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(result))
        except RuntimeError:  # the loop closed while the download finished
            pass

    async def __aiter__(self) -> AsyncIterator[DownloadProgress]:
        self.start()
        assert self._queue is not None
        while True:
            progress = await self._queue.get()
            self.latest = progress
            yield progress
            if progress.finished:
                return

    async def wait(self) -> DownloadResult:
        self.start()
        assert self._future is not None
        return await self._future


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
