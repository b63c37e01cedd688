"""Drive the real `llmdeck` command in tmux, as a person at a terminal would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path


class TmuxSession:
    """One detached tmux session running a command at a fixed size."""

    def __init__(self, command: str, *, env: dict[str, str], width: int = 120, height: int = 40) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux is not installed (apt-get install tmux)")
        self.name = f"llmdeck-test-{uuid.uuid4().hex[:8]}"
        self.socket = f"llmdeck-{uuid.uuid4().hex[:8]}"
        full_env = {**terminal_env(), **env, "TERM": env.get("TERM", "xterm-256color")}
        self._env = full_env
        exports = " ".join(f"{k}={_q(v)}" for k, v in env.items())
        subprocess.run(
            ["tmux", "-L", self.socket, "new-session", "-d", "-s", self.name, "-x", str(width),
             "-y", str(height), f"env {exports} {command}; sleep 30"],
            check=True, env=full_env,
        )

    def send(self, *keys: str, literal: bool = False) -> None:
        args = ["tmux", "-L", self.socket, "send-keys", "-t", self.name]
        if literal:
            args.append("-l")
        subprocess.run([*args, *keys], check=True)  # no pause after: keys are handled in
        # arrival order however fast they come (tui/key_order.py); a test waits on the screen

    def type(self, text: str) -> None:
        self.send(text, literal=True)

    def burst(self, *parts: str | tuple[str]) -> None:
        """Send text and keys in ONE tmux command, as a fast link or a script delivers them:
        a str is typed literally, a 1-tuple is a key name (("Enter",)). No pause anywhere."""
        args = ["tmux", "-L", self.socket]
        for part in parts:
            if args[-1] != self.socket:
                args.append(";")
            if isinstance(part, tuple):
                args += ["send-keys", "-t", self.name, *part]
            else:
                args += ["send-keys", "-t", self.name, "-l", part]
        subprocess.run(args, check=True, env=self._env)

    def send_line(self, text: str) -> None:
        """Type `text` and press Enter in one burst (what the issue's reproduction does)."""
        self.burst(text, ("Enter",))

    def paste(self, text: str, *, bracketed: bool = True) -> None:
        """Paste as a terminal does: with bracketed paste when the app asked for it (-p),
        line feeds sent as carriage returns, as tmux and terminals send them."""
        subprocess.run(["tmux", "-L", self.socket, "set-buffer", "-b", "llmdeck-test", "--", text],
                       check=True, env=self._env)
        subprocess.run(["tmux", "-L", self.socket, "paste-buffer", "-b", "llmdeck-test", "-t",
                        self.name, *(["-p"] if bracketed else [])], check=True, env=self._env)

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "capture-pane", "-p", "-t", self.name],
            check=True, capture_output=True, text=True,
        ).stdout

    def wait_for(self, predicate, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; screen:\n{screen}")

    def pane_pid(self) -> int:
        out = subprocess.run(
            ["tmux", "-L", self.socket, "list-panes", "-t", self.name, "-F", "#{pane_pid}"],
            check=True, capture_output=True, text=True,
        ).stdout
        return int(out.split()[0])

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def terminal_env() -> dict[str, str]:
    """This process's environment less COLUMNS and LINES, for an app in a terminal of its
    own: Textual takes them over the terminal's size, and pytest-xdist's workers have
    COLUMNS=80 LINES=24 (a 120-column tmux pane then drew an 80-column app)."""
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def llmdeck_command() -> str:
    exe = Path(sys.executable).parent / "llmdeck"
    return str(exe)


def _q(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
