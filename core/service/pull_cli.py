"""`llmdeck pull REPO [FILE]` and `llmdeck models pull`: a download the service runs.

The pull is the engine service's job (core.hub.jobs), not this terminal's: it goes on
when the SSH link drops or Ctrl+C is pressed here, and `llmdeck models downloads` (or
the hub screen) shows it from any terminal. This command starts the service when none
runs, asks for the job, then shows its progress until it ends. `--cancel ID` ends one.
Exit codes as `models pull` always had: 0 done, 1 a hub error, 2 bad usage, 130 cancelled
(and 0 after a Ctrl+C that leaves the job running: it is not lost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO

from core.terminal_text import visible

EXIT_OK, EXIT_HUB_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130


def in_service(argv: list[str]) -> bool:
    """Whether `models pull ARGV` is the service's job: unless `--here`, or
    LLMDECK_IN_PROCESS=1 (the in-process app's setting); `--cancel` always is."""
    if "--cancel" in argv:
        return True
    if "--here" in argv or {"-h", "--help"} & set(argv):
        return False
    return os.environ.get("LLMDECK_IN_PROCESS", "") in ("", "0")


def main(argv: list[str]) -> int:
    """`llmdeck pull ...` / `llmdeck models pull ...` through the service."""
    p = argparse.ArgumentParser(prog="llmdeck pull", description="Download a model in the "
                                "engine service: it goes on when this terminal goes.")
    p.add_argument("repo", nargs="?")
    p.add_argument("file", nargs="?", help="the GGUF file, when the repo has several")
    p.add_argument("--revision")
    p.add_argument("--no-mmproj", action="store_true", help="skip the vision projector")
    p.add_argument("--cancel", metavar="ID", help="cancel the service's download ID")
    args = p.parse_args(argv)
    if args.cancel:
        return cancel_main(args.cancel)
    if not args.repo:
        p.print_usage(sys.stderr)
        return EXIT_USAGE
    return pull_main(args.repo, args.file, args.revision, not args.no_mmproj)


def _human(n: float) -> str:
    from core.hub.runnable import human_bytes

    return human_bytes(int(n))


def progress_line(job: dict[str, Any]) -> str:
    """One line for a job: bar, bytes, rate, state, id."""
    total, done = int(job.get("total") or 0), int(job.get("downloaded") or 0)
    fraction = done / total if total else (1.0 if job.get("state") == "done" else 0.0)
    filled = int(fraction * 30)
    eta = f"{job['eta_s']:.0f}s" if isinstance(job.get("eta_s"), (int, float)) else "--"
    line = (f"[{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:5.1f}% "
            f"{_human(done)}/{_human(total)} {_human(job.get('rate_bps') or 0)}/s ETA {eta} "
            f"{job.get('state')} {visible(str(job.get('filename') or job.get('repo')))}")
    if job.get("stalled_s"):
        line += f" · stalled: no data for {job['stalled_s']:.0f} s"
    return line


class SparseLines:
    """Progress for a stream that is no terminal (a log, a pipe, CI): a line each tenth of
    the bytes, one at 100% as soon as the bytes are in, then one for each later state
    (verifying, done); never a line per update, nor one going back (the file-end
    "downloading" after "verifying", the job's "queued" after "planning")."""

    def __init__(self) -> None:
        self.tenths = -1  # the most of the bytes a line said, in tenths
        self.state = ""  # the state the last line said

    def lines(self, job: dict[str, Any]) -> list[str]:
        state = str(job.get("state"))
        total, done = int(job.get("total") or 0), int(job.get("downloaded") or 0)
        tenths = (10 if done >= total else done * 10 // total) if total else 0
        out: list[str] = []
        if _failed_before_bytes(job):  # no bar of 0 B/0 B: the error line says it all
            return out
        if state in ("verifying", "done") and total and tenths == 10 and self.tenths < 10 \
                and job.get("fetched") != 0:  # the bytes are in: 100% says so before the rest
            out.append(self._said({**job, "state": "downloading"}, 10))
        if state == "downloading":
            if tenths > self.tenths:
                out.append(self._said(job, tenths))
        elif state != self.state and not (state == "queued" and self.state):
            out.append(self._said(job, self.tenths))
        return out

    def _said(self, job: dict[str, Any], tenths: int) -> str:
        self.tenths, self.state = tenths, str(job.get("state"))
        return progress_line(job)


async def _follow(repo: str, file: str | None, revision: str | None, include_mmproj: bool,
                  out: TextIO) -> int:
    from core.service.launch import start_or_connect

    client = await start_or_connect("cli")
    seen: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
    client.listeners.append(lambda m: seen.put_nowait(m.get("data") or [])
                            if m.get("event") == "downloads" else None)
    try:
        await client.call("subscribe", topic="downloads")
        job = await client.call("download_start", repo=repo, file=file, revision=revision,
                                include_mmproj=include_mmproj)
        last, sparse, told = "", SparseLines(), False
        while True:
            if not told and _under_way(job):  # not before: a job that fails at once
                told = True  # (offline, no such repo) says its error line alone
                if out.isatty() and last:
                    out.write("\r\x1b[2K")
                    last = ""
                print(visible(f"download {job['id']} runs in the llmdeck service: Ctrl+C leaves "
                              f"it running; `llmdeck models pull --cancel {job['id']}` stops it."),
                      file=out, flush=True)
            line = "" if _failed_before_bytes(job) else progress_line(job)
            if out.isatty() and line != last:  # drawn over: a failure before bytes clears it
                out.write("\r\x1b[2K" + line[:200])
                last = line
            elif not out.isatty() and job.get("total"):  # kept: none before the size is known
                out.writelines(text + "\n" for text in sparse.lines(job))
            out.flush()
            if _finished(job):
                break
            try:
                jobs = await asyncio.wait_for(seen.get(), timeout=5.0)
            except TimeoutError:
                jobs = await client.call("downloads")
            job = next((j for j in jobs if j.get("id") == job["id"]), job)
        if out.isatty() and last:
            out.write("\n")
        ident = await _model_id(client, job) if job.get("state") == "done" else None
    finally:
        await client.close()
    return _report(job, out, ident)


async def _model_id(client: Any, job: dict[str, Any]) -> str | None:
    """The downloaded model's one id, as the service lists it (None if it cannot say)."""
    from core.model_ids import id_of

    try:
        return id_of(job.get("path"), await client.call("local_models"))
    except Exception:  # noqa: BLE001 - the pull is done either way; the id is a courtesy
        return None


def _under_way(job: dict[str, Any]) -> bool:
    """The job has a size and goes on: now it is worth saying where it runs and how to stop
    it (a job that ends before, in an error or from the cache, says only how it ended)."""
    return bool(job.get("total")) and not _finished(job)


def _failed_before_bytes(job: dict[str, Any]) -> bool:
    """A job that ended in an error or a cancel before its size was known (offline, no
    such repo): a progress bar would only say 0 B/0 B."""
    return job.get("state") in ("error", "cancelled") and not job.get("total")


def _finished(job: dict[str, Any]) -> bool:
    return job.get("state") in ("done", "error", "cancelled")


def _report(job: dict[str, Any], out: TextIO, ident: str | None = None) -> int:
    if job.get("state") == "done":
        print(visible(str(job.get("path"))))
        if job.get("fetched") == 0:  # every file was in the cache already
            print(f"already here ({_human(job.get('total') or 0)}): nothing to download",
                  file=out)
        else:
            print(f"downloaded {_human(job.get('total') or 0)}", file=out)
        if ident:
            from core.model_ids import id_line

            print(visible(id_line(ident)), file=out)
        return EXIT_OK
    print(visible(f"error: {job.get('error') or job.get('state')}"), file=out)
    return EXIT_CANCELLED if job.get("state") == "cancelled" else EXIT_HUB_ERROR


async def _call(name: str, **args: Any) -> Any:
    """One call to the running service (listing or cancelling never starts one)."""
    from core.service.client import connect

    client = await connect("cli")
    try:
        return await client.call(name, **args)
    finally:
        await client.close()


def pull_main(repo: str, file: str | None, revision: str | None = None,
              include_mmproj: bool = True) -> int:
    """Start the download in the service and show it; Ctrl+C leaves it running there."""
    from core.service.client import ServiceCallError, ServiceUnavailable

    try:
        return asyncio.run(_follow(repo, file, revision, include_mmproj, sys.stderr))
    except KeyboardInterrupt:
        print("\nthe download goes on in the llmdeck service; `llmdeck models downloads` "
              "shows it", file=sys.stderr)
        return EXIT_OK
    except ServiceCallError as exc:
        print(visible(f"error [{exc.code}]: {exc.message}"), file=sys.stderr)
        return EXIT_USAGE
    except ServiceUnavailable as exc:
        print(visible(f"error: {exc}"), file=sys.stderr)
        return EXIT_HUB_ERROR


def downloads_main() -> int:
    """`llmdeck models downloads`: every job the service knows, one line each."""
    from core.service.client import ServiceUnavailable

    try:
        jobs = asyncio.run(_call("downloads"))
    except ServiceUnavailable:
        print("no downloads (no llmdeck engine service runs)", file=sys.stderr)
        return EXIT_OK
    if not jobs:
        print("no downloads", file=sys.stderr)
    for job in jobs:
        print(f"{job['id']}  {visible(job['repo'])}  {progress_line(job)}"
              + (visible(f"  ({job['error']})") if job.get("error") else ""))
    return EXIT_OK


def cancel_main(job_id: str) -> int:
    from core.service.client import ServiceCallError, ServiceUnavailable

    try:
        asyncio.run(_call("download_cancel", job=job_id))
    except ServiceCallError as exc:
        print(visible(f"error: {exc.message}"), file=sys.stderr)
        return EXIT_USAGE
    except ServiceUnavailable as exc:
        print(visible(f"error: {exc}"), file=sys.stderr)
        return EXIT_HUB_ERROR
    print(visible(f"cancelled {job_id}; its partial file is kept for a later pull"),
          file=sys.stderr)
    return EXIT_OK
