"""A terminal that vanishes without a hang-up signal ends the app.

A real SSH drop sends SIGHUP. Under nohup, or on a pty that is not its controlling
terminal, nothing does: the terminal's input then reads end-of-file for ever, and before
tui.terminal_input noticed that, Textual's input thread spun a core at 100% with the
model loaded (a stray from a development run did so for 70 minutes).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import service_proc as svc
from tests.helpers.pty_app import CLI, PtyApp, scripted_home


@pytest.mark.parametrize("sighup", ["default", "ignored"])
def test_closing_the_terminal_ends_the_app(tmp_path, sighup: str) -> None:  # noqa: ANN001
    """The `llmdeck` command, its home's service's client: the app ends, its service (and
    a reply there) goes on."""
    home = scripted_home(tmp_path / "home")
    app = PtyApp({"LLMDECK_HOME": str(home)}, ignore_sighup=sighup == "ignored", launch=CLI)
    try:
        app.read_until(lambda out: b"scripted:latest" in out, 60, "the first frame")
        app.type_line("hello")  # the app is reading keys when its terminal goes
        app.close_terminal()
        try:
            code = app.proc.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the app still runs 10 s after its terminal closed") from None
        assert code != 0  # ended by the hang-up, not a normal quit
        assert svc.alive(svc.home_service_pid(home)), "the service outlives the terminal"
    finally:
        app.close()
