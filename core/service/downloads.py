"""The service's download calls: `download_start`, `download_cancel`, `downloads`, and the
"downloads" topic that pushes every job's progress to the clients that subscribed.

The jobs (core.hub.jobs) belong to the service's Runtime, so the socket's calls, the HTTP
face's /api/pull and /api/delete and every client see the same ones. Each call's
arguments are checked here, small and whole, before anything runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from core.service.protocol import BAD_CALL, NOT_FOUND, CallError

MAX_NAME = 300  # a repo id, file name or revision longer than this is refused
_pushers: weakref.WeakKeyDictionary[Any, Callable[[list[dict[str, Any]]], None]] = (
    weakref.WeakKeyDictionary())


def open_for(runtime: Any, push: Callable[[list[dict[str, Any]]], None]) -> int:
    """At service start: how to tell the clients, and the jobs a stopped service left
    unfinished started again (how many). Nothing of the hub's downloads is imported when
    there are none: a start with no downloads pays nothing (the hub package is ~20 ms of
    imports, psutil among them, on an app's start in process)."""
    from core import paths

    _pushers[runtime] = push
    try:
        pending = paths.download_jobs_path().stat().st_size > len("[]")
    except OSError:
        pending = False
    return downloads_of(runtime).resume() if pending else 0


def open_for_server(runtime: Any, server: Any) -> int:
    """open_for with the push every service makes: to the clients of `server` subscribed
    to "downloads". ServiceProcess and the in-process Loopback both start their jobs
    here, so `d` in an in-process app shows the same progress as in a service's client."""
    return open_for(runtime, lambda data: server.broadcast(
        {"event": "downloads", "data": data}, "downloads"))


async def close_for(runtime: Any) -> None:
    """At service stop: the running job stops (its partial file and its line in the
    state file kept, so the next service resumes it)."""
    jobs = existing(runtime)
    if jobs is not None:
        await jobs.close()


def downloads_of(runtime: Any) -> Any:
    """The Runtime's jobs (core.hub.jobs), telling the clients of this service."""
    from core.hub.jobs import jobs_for

    jobs = jobs_for(runtime)
    push = _pushers.get(runtime)
    if push is not None:
        jobs.set_on_change(push)
    return jobs


def existing(runtime: Any) -> Any:
    """The Runtime's jobs, or None when no download was ever asked of this service."""
    from core.hub.jobs import existing_jobs

    return existing_jobs(runtime)


def _name(args: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise CallError(BAD_CALL, f"download_start: {key} must be a non-empty string of at "
                        f"most {MAX_NAME} characters.")
    return value.strip()


async def download_start(ctx: Any, args: dict[str, Any]) -> Any:
    """download_start(repo, file?, revision?, load?): the job's dict (the same job when
    that model is already queued)."""
    unknown = set(args) - {"repo", "file", "revision", "load", "include_mmproj"}
    if unknown:
        raise CallError(BAD_CALL, f"download_start: unknown argument {sorted(unknown)[0]!r}.")
    for flag in ("load", "include_mmproj"):
        if flag in args and not isinstance(args[flag], bool):
            raise CallError(BAD_CALL, f"download_start: {flag} must be true or false.")
    repo = _name(args, "repo", required=True)
    assert repo is not None
    from core.hub.jobs import TooManyDownloads

    try:
        job = downloads_of(ctx.runtime).start(repo, _name(args, "file"),
                                              revision=_name(args, "revision"),
                                              load=bool(args.get("load", False)),
                                              include_mmproj=args.get("include_mmproj", True))
    except TooManyDownloads as exc:
        raise CallError(BAD_CALL, str(exc)) from None
    return job.describe()


async def download_cancel(ctx: Any, args: dict[str, Any]) -> Any:
    job_id = args.get("job")
    if not isinstance(job_id, str):
        raise CallError(BAD_CALL, "download_cancel wants {\"job\": \"<id>\"}.")
    jobs = existing(ctx.runtime)
    if jobs is None or not jobs.cancel(job_id):
        raise CallError(NOT_FOUND, f"No download {job_id[:80]!r} is queued or running.")
    return True


async def downloads(ctx: Any, args: dict[str, Any]) -> Any:
    jobs = existing(ctx.runtime)
    return jobs.list() if jobs is not None else []


CALLS = {"download_start": download_start, "download_cancel": download_cancel,
         "downloads": downloads}
