"""Every child process starts through core/workers/bootstrap.py (issue 25): the model
worker, the documents reader and the sandbox each run in their own session, ignore the
terminal's Ctrl+C, and keep their output off the app's terminal; limits hold when asked."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path

from core.workers.bootstrap import Limits, start_child
from tests.fixtures.tools import scripted_runtime


def _ignores_sigint(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def _set_up_like_a_worker(conn) -> None:
    refused = start_child(log_name="bootstrap-test",
                          limits=Limits(open_files=64, file_bytes=1 << 20))
    import resource

    print("to the log, not the terminal", flush=True)
    conn.send((refused, resource.getrlimit(resource.RLIMIT_NOFILE),
               resource.getrlimit(resource.RLIMIT_FSIZE), os.getsid(0) == os.getpid()))


async def test_all_three_kinds_of_child_run_in_their_own_session_without_ctrl_c() -> None:
    rt = scripted_runtime(["hi"], template=None)
    await rt.start()
    try:
        await rt.tools.sandbox.start()
        await rt.chat.utility.ping()
        children = {"model worker": rt.pool.pids()[0], "documents reader": rt.chat.utility.pid,
                    "sandbox": rt.tools.sandbox.pid}
        for name, pid in children.items():
            assert os.getsid(pid) == pid, f"the {name} leads its own session"
            assert os.getsid(pid) != os.getsid(0)
            assert _ignores_sigint(pid), f"the {name} ignores Ctrl+C"
    finally:
        await rt.close()


def test_limits_are_set_and_output_goes_to_the_log(capfd) -> None:
    from core import paths

    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=_set_up_like_a_worker, args=(child,))
    proc.start()
    refused, nofile, fsize, own_session = parent.recv()
    proc.join(10)
    assert refused == [] and own_session
    assert nofile == (64, 64) and fsize == (1 << 20, 1 << 20)
    log = paths.log_dir() / f"bootstrap-test-{proc.pid}.log"
    assert log.read_text() == "to the log, not the terminal\n"
    assert "to the log" not in capfd.readouterr().out
