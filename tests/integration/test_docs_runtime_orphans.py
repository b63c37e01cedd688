"""The utility worker dies with the app: kill -9 the app, and no document reader stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.helpers.procs import wait_gone

pytestmark = pytest.mark.slow

APP = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from core.docs.worker import UtilityWorker

    async def main():
        worker = UtilityWorker(idle_s=600)
        info = await worker.ping()
        print(info["pid"], flush=True)
        await asyncio.sleep(600)

    if __name__ == "__main__":
        asyncio.run(main())
    """
)


def test_killing_the_app_takes_the_utility_worker_with_it(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP.format(root=str(Path(__file__).resolve().parents[2])))
    app = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                           env={**os.environ})
    try:
        line = app.stdout.readline()
        assert line.strip().isdigit(), line
        pid = int(line)
        child = psutil.Process(pid)
        assert child.ppid() == app.pid and "spawn_main" in " ".join(child.cmdline())
        app.send_signal(signal.SIGKILL)  # no atexit, no cleanup: only the kernel can help
        app.wait(timeout=10)
        assert wait_gone([pid], 10) == []
    finally:
        if app.poll() is None:
            app.kill()
