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
        print(visible(f"download {job['id']} runs in the llmdeck service: Ctrl+C leaves it "
                      f"running; `llmdeck models pull --cancel {job['id']}` stops it."),
              file=out, flush=True)
        last = ""
        while not _finished(job):
            try:
                jobs = await asyncio.wait_for(seen.get(), timeout=5.0)
            except TimeoutError:
                jobs = await client.call("downloads")
            job = next((j for j in jobs if j.get("id") == job["id"]), job)
            line = progress_line(job)
            if line != last:
                out.write(("\r\x1b[2K" + line[:200]) if out.isatty() else line + "\n")
                out.flush()
                last = line
        if out.isatty():
            out.write("\n")
    finally:
        await client.close()
    return _report(job, out)


def _finished(job: dict[str, Any]) -> bool:
    return job.get("state") in ("done", "error", "cancelled")


def _report(job: dict[str, Any], out: TextIO) -> int:
    if job.get("state") == "done":
        print(visible(str(job.get("path"))))
        if job.get("fetched") == 0:  # every file was in the cache already
            print(f"already here ({_human(job.get('total') or 0)}): nothing to download",
                  file=out)
        else:
            print(f"downloaded {_human(job.get('total') or 0)}", file=out)
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
