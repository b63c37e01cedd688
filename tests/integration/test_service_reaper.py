"""The suite's own wall (tests/conftest.py, tests/helpers/service_reaper.py): apps and CLIs
a test starts are the home's service's clients, as a user's are, and no service of a
test's home outlives the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import service_proc as svc
from tests.helpers.procs import wait_gone
from tests.helpers.service_reaper import services_under, stop_services_under


def test_the_suite_does_not_pin_the_in_process_app() -> None:
    from tui.cli import _in_process

    assert "LLMDECK_IN_PROCESS" not in os.environ
    assert _in_process(False) is False, "`llmdeck` in a test is the service's client"


def test_a_service_of_the_tests_home_is_found_stopped_and_its_workers_go(
        llmdeck_home: Path, tmp_path: Path) -> None:
    pid = svc.start(*svc.scripted_args())
    svc.wait_for(lambda: svc.descendants(pid), 30, "the model's worker")
    workers = svc.descendants(pid)
    assert services_under(tmp_path) == [pid]
    assert services_under(tmp_path / "elsewhere") == []  # another test's home is not ours
    assert stop_services_under(tmp_path) == []
    assert not svc.alive(pid) and wait_gone(workers, 10) == []
    log = (llmdeck_home / "logs" / "service.log").read_text()
    assert "SIGTERM" in log, "stopped as `service stop` stops it, not killed"


@pytest.mark.parametrize("home_from", ["LLMDECK_HOME", "HOME"])
def test_a_service_that_ignores_the_stop_is_killed(tmp_path: Path, home_from: str) -> None:
    """A stand-in that ignores SIGTERM, named as a service is, its home in LLMDECK_HOME or
    (unset) the user's HOME: found, and killed after the wait."""
    import tests.helpers.service_reaper as reaper

    home = tmp_path / "stubborn"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LLMDECK_HOME"}
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('deaf', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, "service", "run"], text=True,
                            env={**env, home_from: str(home)},
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "deaf"
        assert services_under(tmp_path) == [proc.pid]
        old, reaper.STOP_WAIT_S = reaper.STOP_WAIT_S, 0.5
        try:
            assert stop_services_under(tmp_path) == []
        finally:
            reaper.STOP_WAIT_S = old
        assert proc.wait(5) == -9
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
