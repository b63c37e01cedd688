"""One in-process app (and one server) per llmdeck home, and a clear word when the home is
unusable; apps that are the engine service's clients (`llmdeck` by default) share it.

The real `llmdeck` command: the first app runs in tmux, the second is started as a user
would start it. A second `llmdeck --in-process` exits at once naming the first one's pid;
two plain `llmdeck` both work, on one service.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core import home_lock
from tests.fixtures.small_fs import tmpfs_fixture  # noqa: F401
from tests.helpers.tmux import TmuxSession, llmdeck_command

LLMDECK = llmdeck_command()


def _run(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([LLMDECK, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def _app_pid(tmux: TmuxSession) -> int:
    shell = psutil.Process(tmux.pane_pid())
    return next(p.pid for p in shell.children(recursive=True)
                if any("llmdeck" in part for part in p.cmdline()))


@pytest.mark.slow
def test_a_second_in_process_app_on_one_home_is_refused_naming_the_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tmux = TmuxSession(LLMDECK, env={"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1",
                                     "LLMDECK_IN_PROCESS": "1"})
    try:
        tmux.wait_for(lambda s: "Quit" in s, 60, "the app's first frame")
        first = _app_pid(tmux)
        second = _run(home, "--in-process")
        assert second.returncode == 1
        assert f"pid {first}" in second.stderr and "already running" in second.stderr
        assert "Traceback" not in second.stderr + second.stdout
        # The server is another role: it may run beside the app on the same home.
        served = subprocess.Popen(
            [LLMDECK, "serve", "--engine", "scripted", "--port", "0"], text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1"})
        try:
            # Beside an --in-process app, serve runs its own engine and says so (the
            # service would write the app's history too).
            assert "so serve runs its own (--standalone)" in served.stdout.readline()
            listening = served.stdout.readline()
            assert "listening on" in listening
            again = _run(home, "serve", "--engine", "scripted", "--port", "0")
            assert again.returncode == 1
            assert "llmdeck serve is already running" in again.stderr
            url = listening.split("listening on ")[1].split()[0]
            assert f"listening on {url}" in again.stderr  # issue 48.7: where the first one is
            assert f"pid {served.pid}" in again.stderr
            # `llmdeck workers` shows both engines: the app's and serve's own.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                workers = _run(home, "workers")
                if "llmdeck serve:" in workers.stdout and "\nllmdeck:" in workers.stdout:
                    break
                time.sleep(0.2)
            assert "llmdeck serve:" in workers.stdout and "\nllmdeck:" in workers.stdout, \
                workers.stdout + workers.stderr
            assert "llmdeck service:" not in workers.stdout  # no third engine started
        finally:
            served.terminate()
            served.wait(30)
    finally:
        tmux.close()
    psutil.Process(first).wait(10) if psutil.pid_exists(first) else None
    lock = home_lock.acquire("app")  # the kernel dropped the dead app's lock
    lock.release()


def test_two_apps_on_one_home_both_work_through_the_service(tmp_path: Path) -> None:
    """`llmdeck` as a new user runs it (nothing set): the first starts the service, the
    second attaches to it; neither is refused, both show the service's model."""
    from tests.helpers import service_proc as svc

    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text('model = "scripted"\nengine = "scripted"\n')
    env = {"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1", "LLMDECK_IN_PROCESS": ""}
    with svc.no_service_left(home):
        sessions = []
        try:
            for _ in range(2):
                sessions.append(TmuxSession(LLMDECK, env=env, width=110, height=30))
                sessions[-1].wait_for(lambda s: "scripted:latest ●" in s, 60,
                                      "the app attached to the service's model")
            status = _run(home, "service", "status")
            # two apps; the status command asking is not counted
            assert status.returncode == 0 and "clients  2" in status.stdout, status.stdout
            assert all(psutil.pid_exists(_app_pid(t)) for t in sessions)
        finally:
            for tmux in sessions:
                tmux.close()
        stopped = _run(home, "service", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_the_lock_refuses_a_second_holder_and_frees_on_exit(llmdeck_home: Path) -> None:
    code = ("from core import home_lock; import sys; home_lock.acquire('app'); "
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(home_lock.HomeLockError) as refused:
            home_lock.acquire("app", grace_s=0.2)
        assert refused.value.pid == holder.pid and f"pid {holder.pid}" in refused.value.message
        serve = home_lock.acquire("serve")  # the other role is free
        serve.release()
    finally:
        holder.kill()  # kill -9: the kernel drops an flock with its process
        holder.wait(10)
    home_lock.acquire("app").release()


def test_a_read_only_empty_home_gets_a_sentence_not_a_traceback(tmpfs) -> None:  # noqa: ANN001
    home = tmpfs("ro-home", "1m", read_only=True)
    for args, said in (((), f"cannot write to {home}"),  # the service's client: its config
                       (("serve", "--engine", "scripted", "--port", "0"),
                        "cannot write to its home folder")):
        done = _run(home, *args)
        assert done.returncode == 1, done.stdout + done.stderr
        assert said in done.stderr, done.stderr
        assert "LLMDECK_HOME" in done.stderr and "Traceback" not in done.stderr
    for args in (("paths",), ("workers",), ("models", "list")):
        done = _run(home, *args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"cannot write to {home}" in done.stderr and "LLMDECK_HOME" in done.stderr


def test_an_instance_that_is_quitting_is_waited_for(llmdeck_home: Path) -> None:
    """Quit and start again at once: the old process may still be stopping its workers."""
    code = ("from core import home_lock; import sys, time; home_lock.acquire('app'); "
            "print('held', flush=True); sys.stdin.readline(); time.sleep(0.5)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.stdin.write("quit\n")  # it leaves half a second from now
        holder.stdin.flush()
        lock = home_lock.acquire("app")  # waits for it instead of refusing
        assert holder.wait(5) == 0  # it had gone: the lock was its, not a second holder
        lock.release()
    finally:
        holder.kill()
        holder.wait(10)



def _hold(role: str) -> subprocess.Popen[str]:
    """Another process holding this home's `role` lock until its stdin closes."""
    code = (f"from core import home_lock; import sys; home_lock.acquire({role!r}); "
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_an_in_process_app_is_refused_beside_the_homes_service(llmdeck_home: Path) -> None:
    """Two engines would write one history: `--in-process` says so while a service runs
    (before, it started its own pool beside the service's)."""
    service = _hold("service")
    try:
        done = _run(llmdeck_home, "--in-process")
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"service (pid {service.pid})" in done.stderr
        assert "llmdeck service stop" in done.stderr and "Traceback" not in done.stderr
    finally:
        service.kill()
        service.wait(10)
    assert home_lock.holder("service") is None  # the kernel dropped it with its process


def test_the_service_does_not_start_beside_an_in_process_app(llmdeck_home: Path) -> None:
    app = _hold("app")
    try:
        done = _run(llmdeck_home, "service", "run")
        assert done.returncode == 4, done.stdout + done.stderr
        assert f"--in-process, pid {app.pid}" in done.stderr and "Quit it first" in done.stderr
        assert home_lock.holder("service") is None  # it let its own lock go as it left
    finally:
        app.kill()
        app.wait(10)
