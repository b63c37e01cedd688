"""The engine service as a person drives it: `llmdeck service start|status|stop`, one per
home, `llmdeck workers` and `doctor` asking it, kill -9 leaving nothing behind, and the
idle exit. Real processes throughout (the scripted engine keeps them cheap)."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import service_proc as svc
from tests.helpers.procs import wait_gone


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def _status() -> str:
    done = svc.llmdeck("service", "status")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_start_status_stop(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args())
    assert svc.alive(pid)
    again = svc.llmdeck("service", "start", *svc.scripted_args())
    assert again.returncode == 0 and f"already running (pid {pid})" in again.stdout, \
        "one service per home"
    out = svc.wait_for(lambda: (s := _status()) and "models   scripted" in s and s,
                       30, "the model in status")
    # The status command's own connection is not a client (issue 48, item 6)
    assert f"pid      {pid}" in out and "clients  0" in out
    assert " MB" in out and "MiB" not in out and "uptime" in out  # F4's and doctor's units
    # The socket is the user's alone: a 0600 socket in a 0700 folder, checked from outside.
    sock = svc.socket_path()
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
    workers = svc.descendants(pid)
    assert workers, "the model's worker runs under the service"
    table = svc.llmdeck("workers")
    assert table.returncode == 0 and table.stdout.startswith("llmdeck service:"), table.stdout
    assert str(workers[0]) in table.stdout or any(str(w) in table.stdout for w in workers)
    doctor = svc.llmdeck("doctor", "--offline")
    line = next(x for x in doctor.stdout.splitlines() if " service " in x)
    assert f"pid {pid}" in line and "scripted" in line, line
    assert "0 clients" in line, line  # doctor's own connection is not one
    budget = next(x for x in doctor.stdout.splitlines() if "memory budget" in x)
    assert "held by 1 loaded model (scripted)" in budget, budget  # the service's, as above

    stopped = svc.llmdeck("service", "stop")
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stdout, stopped.stdout
    assert not svc.alive(pid)
    assert wait_gone(workers, 10) == [], "stop leaves no worker"
    assert not sock.exists()
    gone = svc.llmdeck("service", "status")
    assert gone.returncode == 3 and "not running" in gone.stdout
    log = (llmdeck_home / "logs" / "service.log").read_text()
    assert "service ready" in log and "stopped" in log
    assert not any(x.startswith("{") for x in log.splitlines()), "a raw JSON line in the log"
    assert "not running on LLMDECK_HOME=" in gone.stdout
    assert "Hello from the service" not in log, "no conversation text in the log"


def test_kill_9_of_the_service_leaves_no_worker_and_a_new_one_starts(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args())
    workers = svc.wait_for(lambda: svc.descendants(pid), 30, "the worker")
    os.kill(pid, signal.SIGKILL)
    assert wait_gone([pid], 10) == []
    assert wait_gone(workers, 10) == [], "a worker outlived its service's kill -9"
    # The dead service's socket file is still there; a new service replaces it.
    fresh = svc.start(*svc.scripted_args())
    assert fresh != pid and f"pid      {fresh}" in _status()


def test_a_deep_home_gets_a_short_socket_path(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("LLMDECK_HOME", str(deep))
    with svc.no_service_left(deep):
        pid = svc.start(*svc.scripted_args(), "--no-preload")
        sock = svc.socket_path()
        assert len(os.fsencode(sock)) <= 103 and str(sock).startswith(f"/tmp/llmdeck-{os.getuid()}/")
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
        assert f"pid      {pid}" in _status()
        assert svc.llmdeck("service", "stop").returncode == 0
        assert not sock.exists()


def test_idle_exit_with_no_client(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(), "--idle-seconds", "2")
    workers = svc.wait_for(lambda: svc.descendants(pid), 30, "the worker")
    held = svc.raw_client()  # a client holds it open past the idle time
    time.sleep(3.5)
    assert svc.alive(pid), "the service exited under a connected client"
    held.close()
    started = time.monotonic()
    assert wait_gone([pid], 15) == [], "no idle exit"
    assert time.monotonic() - started >= 1.5
    assert wait_gone(workers, 10) == []
    assert "idle for 2 s" in (llmdeck_home / "logs" / "service.log").read_text()


def test_two_starts_at_once_give_one_service(llmdeck_home: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(svc.ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "tui.cli", "service", "start",
                               *svc.scripted_args(), "--no-preload"], cwd=svc.ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=90)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    pids = {int(o.split("(pid ")[1].split(")")[0]) for o in outs}
    assert len(pids) == 1, outs
    def services() -> list[int]:  # service processes of this home, however started
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if "core.service" in (proc.info["cmdline"] or []) and \
                        proc.environ().get("LLMDECK_HOME") == str(llmdeck_home):
                    found.append(proc.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    time.sleep(1.0)  # a loser that lost the lock has exited by now
    assert services() == list(pids), "the second start left a second service running"
    usage = svc.llmdeck("service")  # help, as `llmdeck models` prints (issue 48, item 10)
    assert usage.returncode == 0 and "start" in usage.stdout and "Traceback" not in usage.stderr
