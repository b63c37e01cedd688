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
    assert "llmdeck is not running" in out.stdout
