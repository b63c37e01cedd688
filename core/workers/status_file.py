"""Worker status shared with other terminals through a small JSON file.

The app writes a snapshot about once a second while it runs; `llmdeck workers` (in a
second SSH window) reads and prints it. A file rather than a socket: nothing to listen
on, nothing to secure, and a stale snapshot is detected by the writer's pid.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from core import paths
from core.workers.pool import WorkerStatus


def status_path() -> Path:
    return paths.data_dir() / "workers.json"


def write_status(statuses: list[WorkerStatus], path: Path | None = None) -> None:
    path = path or status_path()
    data = {"pid": os.getpid(), "time": time.time(), "workers": [asdict(s) for s in statuses]}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def read_status(path: Path | None = None) -> tuple[list[WorkerStatus], str | None]:
    """The workers of the running app, or ([], reason) when no app is running."""
    path = path or status_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], "llmdeck is not running (no worker status found)."
    pid = int(data.get("pid", 0))
    try:
        os.kill(pid, 0)
    except (OSError, ProcessLookupError):
        return [], "llmdeck is not running (the last status is from an app that has exited)."
    return [WorkerStatus(**w) for w in data.get("workers", [])], None


def format_table(statuses: list[WorkerStatus]) -> str:
    header = ("WORKER", "MODEL", "ENGINE", "STATE", "PID", "RSS", "ACTIVE", "QUEUED", "TOK/S", "RESTARTS")
    rows = [header]
    for s in statuses:
        rows.append((
            s.worker_id, s.model[:32], s.engine, s.state, str(s.pid or "-"),
            f"{s.rss_bytes / 2**20:.0f}M" if s.rss_bytes else "-",
            str(s.active), str(s.queued), f"{s.tokens_per_s:.1f}", str(s.restarts),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for s in statuses:
        if s.error:
            lines.append(f"{s.worker_id}: {s.error}")
    return "\n".join(lines)


def main() -> int:
    statuses, problem = read_status()
    if problem:
        print(problem)
        return 1
    print(format_table(statuses) if statuses else "No model is loaded.")
    return 0
