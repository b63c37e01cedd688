"""A tmux whose client runs in a pty we read: the outer terminal is the test, so it sees
exactly the bytes tmux lets out (what passes through, how cells are redrawn)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
import uuid
from pathlib import Path

from tests.helpers.tmux import terminal_env


class RealTmux:
    """A tmux server of its own whose client runs in a pty: the outer terminal is us."""

    def __init__(self, tmp: Path, passthrough: bool, inner: str) -> None:
        self.socket = f"llmdeck-gfx-{uuid.uuid4().hex[:8]}"
        conf = tmp / "tmux.conf"
        conf.write_text(f"set -g allow-passthrough {'on' if passthrough else 'off'}\n")
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            ["tmux", "-L", self.socket, "-f", str(conf), "new-session", "-x", "80", "-y", "24",
             inner], stdin=slave, stdout=slave, stderr=slave,
            env={**terminal_env(), "TERM": "xterm-256color"}, start_new_session=True)
        os.close(slave)
        self.output = b""

    def read_until(self, marker: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while marker not in self.output and time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:
                    break
        return marker in self.output

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.master)

    def type_line(self, text: str) -> None:
        """Type `text` and press Enter in one tmux command."""
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-l", text, ";",
                        "send-keys", "Enter"], check=True)
