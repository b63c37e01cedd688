"""Worker status shared with other terminals through a small JSON file.

The app writes a snapshot about once a second while it runs; `llmdeck workers` (in a
second SSH window) reads and prints it. A file rather than a socket: nothing to listen
on, nothing to secure, and a stale snapshot is detected by the writer's pid.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path

from core import json_text, paths
from core.terminal_text import visible
from core.workers.pool import WorkerStatus

# One file per role (core.home_lock): an app and a server sharing a home each keep their own.
FILE_NAMES = {"app": "workers.json", "serve": "workers-serve.json",
              "service": "workers-service.json"}
_TMP = re.compile(r"^\.(workers(?:-serve|-service)?\.json)\.(\d+)\.tmp$")
_swept = False


def status_path(role: str | None = None) -> Path:
    """This process's status file: the server's when it runs as `llmdeck serve`."""
    from core.home_lock import held_role

    role = role or held_role() or "app"
    return paths.data_dir() / FILE_NAMES.get(role, FILE_NAMES["app"])


def write_status(statuses: list[WorkerStatus], path: Path | None = None) -> None:
    """Replace the status file atomically (write a temporary file, rename it). A temporary
    file never outlives a failed write (a full disk), and those of processes that died
    between write and rename are swept once per process."""
    global _swept
    path = path or status_path()
    if not _swept:
        _swept = True
        sweep_temporary_files(path.parent)
    data = {"pid": os.getpid(), "time": time.time(), "workers": [asdict(s) for s in statuses]}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sweep_temporary_files(folder: Path) -> list[Path]:
    """Delete the status files' temporaries left by processes that are gone; returns them."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _TMP.match(name)
        if match and not _alive(int(match.group(2))):
            try:
                (folder / name).unlink()
                removed.append(folder / name)
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def read_status(path: Path | None = None) -> tuple[list[WorkerStatus], str | None]:
    """The workers of the running app, or ([], reason) when no app is running."""
    path = path or status_path("app")
    try:
        data = json_text.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], "llmdeck is not running (no worker status found)."
    try:
        pid = int(data.get("pid", 0))
        if pid > 0 and _alive(pid):
            return [WorkerStatus(**w) for w in data.get("workers", [])], None
    except (AttributeError, TypeError, ValueError, OverflowError):
        return [], f"The worker status file {path} is damaged; it is rewritten while llmdeck runs."
    return [], "llmdeck is not running (the last status is from an app that has exited)."


def format_table(statuses: list[WorkerStatus]) -> str:
    """The table `llmdeck workers` prints. Every string in it came from outside this
    process (a model's name, an MCP server's last words on stderr), so each goes through
    core.terminal_text.visible: an escape sequence in one is shown, never obeyed."""
    header = ("WORKER", "MODEL", "ENGINE", "STATE", "PID", "RSS", "MEMORY", "ACTIVE", "QUEUED", "TOK/S", "THREADS",
              "RESTARTS")
    rows = [header]
    for s in statuses:
        rows.append((
            _cell(s.worker_id, 40), _cell(s.model, 32), _cell(s.engine, 16), _cell(s.state, 16),
            str(s.pid or "-"),
            f"{s.rss_bytes / 10**6:.0f}MB" if s.rss_bytes else "-",  # as MEMORY beside it
            f"{s.memory_bytes / 10**6:.0f}MB" if s.memory_bytes else "-",  # admission's count
            str(s.active), str(s.queued), f"{s.tokens_per_s:.1f}", str(s.threads or "-"),
            str(s.restarts),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for s in statuses:
        if s.error:
            lines.append(f"{_cell(s.worker_id, 40)}: {_cell(str(s.error), MAX_ERROR_CHARS)}")
    return "\n".join(lines)


MAX_ERROR_CHARS = 500


def _cell(value: object, limit: int) -> str:
    """An outside string as one safe line: control characters shown (newlines too: a
    table row must stay one row), cut to `limit` characters."""
    text = visible(str(value)).replace("\n", "␤").replace("\t", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


NOTHING_RUNS = ("The llmdeck service is not running on this home, so no model is loaded "
                "(`llmdeck` or `llmdeck service start` starts it).")


def main() -> int:
    """`llmdeck workers` when no service answers: an app or a `serve --standalone` with a
    pool of its own, else a sentence saying nothing runs (it said "llmdeck is not running
    (no worker status found)" to a person who had just run llmdeck)."""
    statuses, problem = read_status()
    served, serve_problem = read_status(status_path("serve"))
    if problem and serve_problem:
        print(NOTHING_RUNS if "is not running" in problem else problem)
        return 1
    if not serve_problem:  # `llmdeck serve` runs on this home too: show both
        print("llmdeck serve:")
        print(format_table(served) if served else "No model is loaded.")
        if problem:
            return 0
        print("\nllmdeck:")
    print(format_table(statuses) if statuses else "No model is loaded.")
    return 0
