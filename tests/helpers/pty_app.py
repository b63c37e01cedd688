"""The real `llmdeck` in a child process whose terminal is a pty the test holds the other end of.

Real Textual with its Linux driver, every byte it writes readable here. The pty is not
the child's controlling terminal (it runs in a session of its own and never opens it), so
closing our end sends it no SIGHUP: what a terminal does that vanishes without one.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.helpers.tmux import terminal_env

ROOT = Path(__file__).resolve().parents[2]
# The `llmdeck` command itself (tui.cli: lenient input that notices a vanished terminal,
# answers to our queries that are not keys), the client of its home's detached service,
# as a user's: its home's config names the engine (scripted_home), its service is stopped
# at the test's end (tests/conftest.py).
CLI = "import sys; from tui.cli import main; sys.exit(main([]))"
SCRIPTED_CONFIG = 'model = "scripted"\nengine = "scripted"\n'


def scripted_home(home: Path) -> Path:
    """A home whose service loads the scripted engine."""
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text(SCRIPTED_CONFIG, encoding="utf-8")
    return home


class PtyApp:
    """The app on a pty; `env` is laid over the environment (None removes a name)."""

    def __init__(self, env: dict[str, str | None] | None = None, columns: int = 120,
                 rows: int = 40, ignore_sighup: bool = False, launch: str = CLI) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        full_env = {**terminal_env(), "TERM": "xterm-256color"}
        for name, value in (env or {}).items():
            if value is None:
                full_env.pop(name, None)
            else:
                full_env[name] = value

        def child_setup() -> None:  # as `nohup` starts a program
            if ignore_sighup:
                signal.signal(signal.SIGHUP, signal.SIG_IGN)

        self.proc = subprocess.Popen([sys.executable, "-c", launch], cwd=ROOT, env=full_env,
                                     stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True, preexec_fn=child_setup)
        os.close(slave)
        self.output = b""
        self.master_open = True

    def read_until(self, predicate, timeout: float, what: str) -> bytes:
        deadline = time.monotonic() + timeout
        while not predicate(self.output):
            left = deadline - time.monotonic()
            if left <= 0:
                tail = self.output[-1500:].decode(errors="replace")
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: {tail!r}")
            if select.select([self.master], [], [], min(left, 0.5))[0]:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"the app exited waiting for {what}") from None
        return self.output

    def type_line(self, text: str) -> None:
        os.write(self.master, text.encode() + b"\r")  # text and Enter in one write

    def close_terminal(self) -> None:
        """Close our end: the terminal is gone (no hang-up signal is sent)."""
        if self.master_open:
            os.close(self.master)
            self.master_open = False

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.close_terminal()
