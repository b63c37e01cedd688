"""`llmdeck workers` in a second terminal shows the running app's workers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime

LLMDECK = str(Path(sys.executable).parent / "llmdeck")


def _workers() -> subprocess.CompletedProcess[str]:
    return subprocess.run([LLMDECK, "workers"], capture_output=True, text=True, timeout=60,
                          env=os.environ.copy())


async def test_workers_table_lists_the_running_apps_model() -> None:
    spec = ModelSpec("scripted", "scripted", options=(("label", "scripted-x"),))
    rt = Runtime(Settings(), model_spec=spec)
    await rt.start()
    assert await rt.ensure_model()
    await asyncio.sleep(1.5)  # the status file is refreshed every second
    out = await asyncio.to_thread(_workers)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["WORKER", "MODEL", "ENGINE", "STATE"]
    row = lines[1].split()
    assert row[1] == "scripted-x" and row[2] == "scripted" and row[3] == "idle"
    assert int(row[4]) == rt.pool.pids()[0]
    await rt.close()
    out = await asyncio.to_thread(_workers)
    assert out.returncode == 1 and "not running" in out.stdout


def test_workers_without_a_running_app_says_so() -> None:
    out = _workers()
    assert out.returncode == 1
    assert "The llmdeck service is not running" in out.stdout
    assert "llmdeck service start" in out.stdout and "worker status" not in out.stdout


def test_workers_prints_outside_strings_shown_not_obeyed() -> None:
    """An MCP server's last words and a model's name are outside text: OSC 52 (clipboard),
    OSC 0 (title) and CSI 2J (clear) in them reach the terminal as pictures, one row each."""
    from core.workers.pool import WorkerStatus
    from core.workers.status_file import status_path, write_status

    hostile = "\x1b]52;c;aGVsbG8=\x07\x1b]0;owned\x07\x1b[2J"
    rows = [
        WorkerStatus(worker_id="w0", model=f"evil{hostile}", engine="scripted", state="ready",
                     pid=os.getpid(), rss_bytes=0, active=0, queued=0, tokens_per_s=0.0, restarts=0),
        WorkerStatus(worker_id="mcp:notes", model="mcp notes", engine="mcp", state="failed", pid=None,
                     rss_bytes=0, active=0, queued=0, tokens_per_s=0.0, restarts=0,
                     error=f"exited during start-up (its last words: {hostile}\nsecond line{'x' * 5000})"),
    ]
    write_status(rows, status_path("app"))
    out = _workers()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert "␛]52;c;aGVsbG8=␇" in out.stdout and "␛[2J" in out.stdout
    error_line = next(line for line in out.stdout.splitlines() if line.startswith("mcp:notes:"))
    assert "second line" in error_line and len(error_line) < 600, "one bounded line per error"
