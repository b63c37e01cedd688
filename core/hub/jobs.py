"""Downloads as the service's jobs: they outlive the terminal that started them.

A multi-gigabyte pull started from the hub screen, `llmdeck pull` or Ollama's /api/pull
runs here, in the engine service, one after another (two side by side each take twice
as long). Any client lists every job and its progress, and can cancel one. The jobs not
yet finished are written to `downloads.json` in the data folder at each change of state,
so a service that stops (or is killed) picks them up again when it starts: the partial
file is resumed, not fetched again (core.hub.download). A job can ask for its model to
be loaded once it is on disk (`load`).

Nothing here knows the socket: the service passes `on_change` (a list of job dicts to
push to clients) and `on_done` (the load), and calls `start`, `cancel` and `list`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import json_text

if TYPE_CHECKING:  # the download machinery loads with the first job, not at service start
    from core.hub.download import DownloadProgress
    from core.hub.download_job import DownloadJob

log = logging.getLogger("llmdeck.downloads")
PUSH_INTERVAL_S = 0.25  # progress pushed to clients at most this often (and every change)
KEEP_FINISHED = 20  # finished jobs listed (the newest); older ones are forgotten
# Jobs queued or running at once: a client (a script, a probe) asking for thousands would
# grow the list, and downloads.json written whole at each change, without bound.
MAX_UNFINISHED = 64
MAX_STATE_BYTES = 1 << 20  # downloads.json: 64 jobs take a few KB


class TooManyDownloads(ValueError):
    """MAX_UNFINISHED jobs are queued or running already; the sentence says what to do."""


@dataclass
class Job:
    """One download the service runs: what was asked, and its latest progress."""

    id: str
    repo: str
    file: str | None = None
    revision: str | None = None
    load: bool = False  # load the model once it is on disk
    include_mmproj: bool = True
    started_at: float = field(default_factory=time.time)
    progress: DownloadProgress | None = None
    state: str = "queued"  # queued | planning | downloading | verifying | done | error | cancelled
    error: str | None = None
    error_code: str | None = None  # core.hub.errors' code (OFFLINE, DISK_FULL, ...)
    path: str | None = None
    fetched: int | None = None  # bytes this job took from the Hub (0: all already here)
    runner: DownloadJob | None = None
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.state in ("done", "error", "cancelled")

    def describe(self) -> dict[str, Any]:
        """Plain JSON for the socket and the HTTP faces."""
        p = self.progress
        return {"id": self.id, "repo": self.repo, "file": self.file, "revision": self.revision,
                "load": self.load, "state": self.state, "error": self.error, "error_code": self.error_code,
                "path": self.path, "fetched": self.fetched,
                # what was planned: the GGUF picked (a pull that named no file too), or
                # "" for an MLX repo; None until the repo's files are listed
                "format": self.runner.plan.format if self.runner else None,
                "primary": self.runner.plan.primary if self.runner else None,
                "filename": p.filename if p else (self.file or ""),
                "downloaded": p.downloaded if p else 0, "total": p.total if p else 0,
                "rate_bps": round(p.rate_bps, 1) if p else 0.0,
                "eta_s": round(p.eta_s, 1) if p and p.eta_s is not None else None,
                "stalled_s": p.stalled_s if p else None, "started_at": self.started_at}

    def asked(self) -> dict[str, Any]:
        """What a restart needs to run it again."""
        return {"id": self.id, "repo": self.repo, "file": self.file, "revision": self.revision,
                "load": self.load, "include_mmproj": self.include_mmproj,
                "started_at": self.started_at}


OnChange = Callable[[list[dict[str, Any]]], None]
OnDone = Callable[[Job], Awaitable[None]]


class DownloadJobs:
    """The service's download jobs, run one at a time in the order asked."""

    def __init__(self, state_file: Path, *, on_change: OnChange | None = None,
                 on_done: OnDone | None = None, cache_dir: Path | None = None) -> None:
        self.state_file = state_file
        self.jobs: list[Job] = []
        self._on_change = on_change
        self._on_done = on_done
        self._cache_dir = cache_dir
        self._pending: asyncio.Queue[Job] = asyncio.Queue()
        self._runner: asyncio.Task[None] | None = None
        self._numbers = 0
        self._pushed = 0.0
        self._push_later: asyncio.TimerHandle | None = None
        self._closing = False  # the service stops: its unfinished jobs stay saved

    def set_on_change(self, on_change: OnChange | None) -> None:
        self._on_change = on_change

    # -- asking -------------------------------------------------------------------------
    def start(self, repo: str, file: str | None = None, *, revision: str | None = None,
              load: bool = False, include_mmproj: bool = True, job_id: str | None = None,
              started_at: float | None = None) -> Job:
        """Queue a download (call on the service's loop); the same model already queued
        or running is that job, not a second one."""
        for job in self.jobs:
            if not job.finished and (job.repo, job.file, job.revision) == (repo, file, revision):
                job.load = job.load or load
                return job
        if sum(not j.finished for j in self.jobs) >= MAX_UNFINISHED:
            raise TooManyDownloads(f"{MAX_UNFINISHED} downloads are queued or running "
                                   "already; wait for one to end, or cancel one (`llmdeck "
                                   "pull --cancel <id>`).")
        self._numbers += 1
        job = Job(job_id or f"dl-{int(time.time())}-{self._numbers}", repo, file, revision,
                  load, include_mmproj)
        if started_at is not None:
            job.started_at = started_at
        self.jobs.append(job)
        self._pending.put_nowait(job)
        self._changed(job, now=True)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run())
        return job

    def cancel(self, job_id: str) -> bool:
        """End a running job at once (its partial file kept), or a waiting one before it
        starts; False when no unfinished job has that id."""
        job = self.get(job_id)
        if job is None or job.finished:
            return False
        job.cancelled = True
        if job.runner is not None:
            job.runner.cancel()
        else:
            job.state, job.error = "cancelled", f"Download of {job.repo} cancelled."
            self._changed(job, now=True)
        return True

    def get(self, job_id: Any) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def list(self) -> list[dict[str, Any]]:
        return [j.describe() for j in self.jobs]

    def busy(self) -> bool:
        """A job is queued or running (the service does not exit idle under it)."""
        return any(not j.finished for j in self.jobs)

    def resume(self) -> int:
        """Queue again the jobs a stopped service left unfinished; how many."""
        try:
            with open(self.state_file, "rb") as f:
                raw = f.read(MAX_STATE_BYTES + 1)
            if len(raw) > MAX_STATE_BYTES:
                raise ValueError("larger than any list of downloads we write")
            saved = json_text.loads(raw)  # nested too deep: ValueError, not RecursionError
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            log.warning("downloads: could not read %s (%s); none resumed", self.state_file,
                        type(exc).__name__)
            return 0
        count = 0
        for item in saved[:MAX_UNFINISHED] if isinstance(saved, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("repo"), str):
                continue
            self.start(item["repo"], _text(item.get("file")), revision=_text(item.get("revision")),
                       load=bool(item.get("load")), include_mmproj=item.get("include_mmproj", True)
                       is not False, job_id=_text(item.get("id")),
                       started_at=item.get("started_at") if isinstance(
                           item.get("started_at"), (int, float)) else None)
            count += 1
        return count

    async def close(self) -> None:
        """Stop the running job (its partial file kept; the state file still lists it, so
        the next service resumes it)."""
        self._closing = True
        for job in self.jobs:
            if job.runner is not None and not job.finished:
                job.runner.cancel()
        if self._runner is not None:
            self._runner.cancel()

    # -- running --------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._pending.empty():
            job = self._pending.get_nowait()
            if job.finished:
                continue
            await self._one(job)

    async def _one(self, job: Job) -> None:
        from core.hub.download_job import DownloadJob
        from core.hub.errors import HubError
        from core.hub.listing import list_files, plan_download

        job.state = "planning"
        self._changed(job, now=True)
        try:
            listing = await asyncio.to_thread(list_files, job.repo, job.revision)
            plan = plan_download(listing, job.file, include_mmproj=job.include_mmproj)
        except HubError as err:
            job.state, job.error, job.error_code = "error", err.message, err.code
            self._changed(job, now=True)
            return
        if job.cancelled:
            job.state, job.error = "cancelled", f"Download of {job.repo} cancelled."
            self._changed(job, now=True)
            return
        job.runner = DownloadJob(plan, cache_dir=self._cache_dir)
        async for progress in job.runner:
            job.progress = progress
            if progress.finished:  # the end is told below, whole: with its path or sentence
                continue  # (a client stops at the first end state it sees)
            state_changed = progress.state != job.state
            job.state = progress.state
            self._changed(job, now=state_changed or progress.finished)
        result = await job.runner.wait()
        job.fetched = result.bytes_fetched
        if result.error is not None:
            job.state = "cancelled" if result.error.code == "CANCELLED" else "error"
            job.error, job.error_code = result.error.message, result.error.code
        else:
            job.state, job.path = "done", str(result.path) if result.path else None
        self._changed(job, now=True)
        if job.state == "done" and job.load and self._on_done is not None:
            try:
                await self._on_done(job)
            except Exception as exc:  # noqa: BLE001 - the download stands; the load said why
                log.warning("downloads: loading %s failed (%s)", job.repo, type(exc).__name__)

    # -- telling ---------------------------------------------------------------------------
    def _changed(self, job: Job, *, now: bool) -> None:
        if now:
            self._save()
        if self._on_change is None:
            return
        wait = PUSH_INTERVAL_S - (time.monotonic() - self._pushed)
        if now or wait <= 0:
            self._push()
        elif self._push_later is None:
            self._push_later = asyncio.get_running_loop().call_later(wait, self._push)

    def _push(self) -> None:
        if self._push_later is not None:
            self._push_later.cancel()
            self._push_later = None
        self._pushed = time.monotonic()
        finished = [j for j in self.jobs if j.finished]
        for old in finished[:-KEEP_FINISHED]:
            self.jobs.remove(old)
        if self._on_change is not None:
            self._on_change(self.list())

    def _save(self) -> None:
        """The unfinished jobs, written whole and renamed into place."""
        if self._closing:
            return  # a stop is not a cancel: the next service resumes them
        unfinished = [j.asked() for j in self.jobs if not j.finished]
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}.tmp")
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(unfinished), encoding="utf-8")
            tmp.replace(self.state_file)
        except OSError as exc:
            log.warning("downloads: could not save %s (%s)", self.state_file,
                        type(exc).__name__)


_by_owner: weakref.WeakKeyDictionary[Any, DownloadJobs] = weakref.WeakKeyDictionary()


def state_file() -> Path:
    """Where the unfinished jobs are kept between two runs of the service."""
    from core import paths

    return paths.download_jobs_path()


def jobs_for(owner: Any) -> DownloadJobs:
    """The jobs of `owner` (the service's Runtime: the socket's calls and the HTTP face
    share them), made on first use. A job asked to load its model switches `owner` to it."""
    found = _by_owner.get(owner)
    if found is None:
        async def load(job: Job) -> None:
            if job.path:
                await owner.switch_model(job.path, None)

        found = _by_owner[owner] = DownloadJobs(state_file(), on_done=load)
    return found


def existing_jobs(owner: Any) -> DownloadJobs | None:
    """`owner`'s jobs, or None when no download was ever asked of it."""
    return _by_owner.get(owner)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
