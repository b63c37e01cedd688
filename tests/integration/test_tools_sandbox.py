"""The Python sandbox worker: a real process, contained.

Runaway loops stop at the timeout, memory bombs kill only the sandbox (it respawns), the
namespace lasts across runs, and a chat streaming from a model worker meanwhile keeps
streaming.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from core import paths
from core.config import Settings
from core.events import Done, TextDelta
from core.tools import Sandbox
from tests.fixtures.tools import scripted_runtime


def _runners(launcher_pid: int) -> list[int]:
    """Host pids of the processes where the code runs (runner.py) below a sandbox."""
    import psutil

    return [p.pid for p in psutil.Process(launcher_pid).children(recursive=True)
            if any(arg.endswith("runner.py") for arg in p.cmdline())]


# Grows by 8 MiB steps with a pause, so the bomb lasts long enough for the chat to stream
# next to it; bytearray pages are never touched, so the test costs address space, not RAM.
BOMB = ("import time\nhog = []\nwhile True:\n"
        "    hog.append(bytearray(8 * 1024 * 1024))\n    time.sleep(0.005)")


async def test_namespace_persists_across_runs_and_is_per_conversation() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=768)
    try:
        first = await sb.run("c1", "import math\nx = 41\nprint('set')")
        assert first.ok and first.stdout == "set\n" and first.value is None
        second = await sb.run("c1", "x += 1\nmath.sqrt(x * x)")
        assert second.ok and second.value == "42.0", "the last expression's repr, like a notebook"
        other = await sb.run("c2", "x")
        assert not other.ok and "NameError" in other.error
        assert first.pid == second.pid != other.pid, "each conversation has its own sandbox"
    finally:
        await sb.close()


async def test_errors_show_the_cells_traceback_and_stderr() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=768)
    try:
        r = await sb.run("c", "import sys\nprint('oops', file=sys.stderr)\ndef f():\n    return 1 / 0\nf()")
        assert not r.ok and r.kind == "exception"
        assert r.stderr == "oops\n"
        assert "ZeroDivisionError" in r.error and "return 1 / 0" in r.error
        assert "sandbox/runner.py" not in r.error, "the runner's own frames are not shown"
        syntax = await sb.run("c", "1 +")
        assert syntax.kind == "exception" and "SyntaxError" in syntax.error
        assert "[stderr]\noops" in r.text() and "ZeroDivisionError" in r.text()
    finally:
        await sb.close()


async def test_matplotlib_figures_are_saved_as_png_under_the_data_dir() -> None:
    sb = Sandbox(timeout_s=60, memory_mb=1024)
    try:
        r = await sb.run("conv", "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')")
        assert r.ok, r.text()
        assert len(r.figures) == 1
        png = Path(r.figures[0])
        assert png.is_relative_to(paths.data_dir()) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"[figure saved: {png}]" in r.text()
        again = await sb.run("conv", "len(plt.get_fignums())")
        assert again.value == "0", "figures are closed once saved"
    finally:
        await sb.close()


async def test_runaway_loop_is_stopped_at_the_timeout_and_the_sandbox_respawns() -> None:
    sb = Sandbox(timeout_s=1.5, memory_mb=768)
    try:
        await sb.run("c", "kept = 1")
        r = await sb.run("c", "while True:\n    pass")
        assert not r.ok and r.kind == "timeout" and r.reset
        assert "1.5 s limit" in r.error
        after = await sb.run("c", "'kept' in globals()")
        assert after.ok and after.value == "False", "a new process, a fresh namespace"
        assert after.pid != r.pid and sb.restarts == 1
    finally:
        await sb.close()


async def test_a_hard_crash_is_reported_and_the_next_run_works() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=768)
    try:
        r = await sb.run("c", "import os\nos._exit(9)")
        assert r.kind == "crashed" and r.reset
        assert (await sb.run("c", "1 + 1")).value == "2"
    finally:
        await sb.close()


async def test_memory_bomb_kills_only_the_sandbox_while_a_chat_keeps_streaming() -> None:
    # A long reply streamed at a steady pace by a model worker process (5 s: the bomb takes
    # about 1 s to reach the limit on a loaded 2-core box, and must end before the reply).
    rt = scripted_runtime(["word " * 1000], template=None, tokens_per_s=200, chunk_chars=5,
                          settings=Settings(python_memory_mb=512))
    await rt.start()
    try:
        sandbox = rt.tools.sandbox
        await sandbox.run("c", "before = 1")
        runners = _runners(sandbox.pid)
        model_pids = rt.pool.pids()
        turn = await rt.start_turn(None, "talk")
        deltas_during_bomb: list[int] = []
        bombing = asyncio.Event()
        events: list = []

        async def stream() -> None:
            async for e in turn.events():
                events.append(e)
                if isinstance(e, TextDelta) and bombing.is_set():
                    deltas_during_bomb.append(1)

        streaming = asyncio.ensure_future(stream())
        while not any(isinstance(e, TextDelta) for e in events):
            await asyncio.sleep(0.01)
        bombing.set()
        bomb = await sandbox.run("c", BOMB)
        bombing.clear()
        assert not bomb.ok and bomb.kind == "memory" and bomb.reset, bomb
        assert "512 MiB" in bomb.error
        assert not streaming.done(), "the chat was still streaming when the bomb went off"
        await asyncio.wait_for(streaming, 60)
        assert events[-1] == Done("stop")
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "word " * 1000
        assert deltas_during_bomb, "deltas kept arriving while the sandbox ran the bomb"
        assert rt.pool.pids() == model_pids, "the model worker was not touched"
        after = await sandbox.run("c", "'before' in globals()")
        assert after.ok and after.value == "False"
        assert runners and not set(runners) & set(_runners(sandbox.pid)), \
            "the process that ran the bomb was replaced"
    finally:
        await rt.close()


async def test_a_python_run_keeps_the_chat_streaming_while_it_loops() -> None:
    rt = scripted_runtime(["tick " * 200], template=None, tokens_per_s=200, chunk_chars=5,
                          settings=Settings(python_timeout_s=1.0))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "talk")
        seen_while_looping: list[int] = []
        looping = asyncio.Event()
        started = asyncio.Event()

        async def stream() -> None:
            async for e in turn.events():
                if isinstance(e, TextDelta):
                    started.set()
                    if looping.is_set():
                        seen_while_looping.append(1)

        streaming = asyncio.ensure_future(stream())
        await asyncio.wait_for(started.wait(), 60)
        looping.set()
        r = await rt.tools.sandbox.run("c", "while True:\n    pass")
        looping.clear()
        assert r.kind == "timeout"
        assert seen_while_looping
        await asyncio.wait_for(streaming, 60)
    finally:
        await rt.close()


async def test_close_leaves_no_sandbox_process() -> None:
    from tests.helpers.procs import wait_gone

    sb = Sandbox(timeout_s=10, memory_mb=512)
    await sb.run("c", "1")
    pid = sb.pid
    assert pid is not None
    await sb.close()
    assert wait_gone([pid], 5) == []
    r = await sb.run("c", "1")
    assert not r.ok and "shut down" in r.error


LEAK_SCRIPT = """
import asyncio
from core.tools import Sandbox

async def main():
    sb = Sandbox(timeout_s=20, memory_mb=768)
    r = await sb.run("c", "import os\\nos.system('echo LEAKED-TO-TERMINAL')\\nprint('captured')")
    await sb.close()
    return r.stdout

if __name__ == "__main__":
    print("stdout=" + asyncio.run(main()).strip())
"""


def test_output_below_python_never_reaches_the_apps_terminal(tmp_path: Path) -> None:
    script = tmp_path / "leak.py"
    script.write_text(LEAK_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert "stdout=captured" in done.stdout
    assert "LEAKED" not in done.stdout + done.stderr


async def test_a_sandbox_that_cannot_start_is_a_result_not_an_exception(monkeypatch) -> None:
    from core.tools.sandbox import client

    sb = Sandbox(timeout_s=5, memory_mb=512)
    monkeypatch.setattr(client, "START_TIMEOUT_S", 0.0)  # it never answers "ready" in time
    r = await sb.run("c", "1")
    assert not r.ok and r.kind == "crashed" and "did not start" in r.error
    monkeypatch.setattr(client, "START_TIMEOUT_S", 60.0)
    assert (await sb.run("c", "1")).value == "1", "the next run starts it again"
    await sb.close()


async def test_the_settings_screen_shows_the_sandbox_limits_and_saves_the_scratch_size(
        monkeypatch) -> None:
    import tomllib

    from tests.fixtures.tui import scripted_app, wait_ready

    app = scripted_app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f3")
        await pilot.pause(0.2)
        limits = str(app.screen.query_one("#sandbox-limits").render())
        assert "30 s a run" in limits and "1024 MiB of memory for all its processes" in limits
        assert "256 MiB of scratch" in limits and "64 processes" in limits
        assert "full rights" not in limits, "behind the walls"
        field = app.screen.query_one("#set-python_scratch_mb")
        field.focus()
        await pilot.press("end", *["backspace"] * len(field.value), *"8")
        await pilot.pause(0.1)
        assert "between 16 and 65536 MiB" in str(app.screen.query_one("#why-python_scratch_mb").render())
        await pilot.press("backspace", *"64")
        await pilot.pause(0.1)
        assert "64 MiB of scratch" in str(app.screen.query_one("#sandbox-limits").render()), \
            "the line follows what is typed"
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert app.runtime.local.tools.sandbox.scratch_mb == 64
    saved = tomllib.loads(paths.config_path().read_text())
    assert saved["python_scratch_mb"] == 64
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "0")
    app = scripted_app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f3")
        await pilot.pause(0.2)
        assert "full rights" in str(app.screen.query_one("#sandbox-limits").render())
