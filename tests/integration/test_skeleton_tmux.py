"""The real `llmdeck` command in a real terminal (tmux 120x40), keys only."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.helpers import service_proc as svc
from tests.helpers.procs import wait_gone, worker_pids
from tests.helpers.tmux import TmuxSession, llmdeck_command

READY = "●"  # the status bar's ready mark
CHAT_COLUMN = 34  # the chat view starts right of the 32-column sidebar


def reply_started(screen: str) -> bool:
    """True once a line of reply text stands under the Assistant label."""
    lines = screen.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line[CHAT_COLUMN - 2 :].strip().startswith("Assistant"):
            nxt = lines[i + 1][CHAT_COLUMN - 2 :].strip()
            return bool(nxt) and not nxt.startswith("╭")
    return False


def _start(home: Path, *args: str) -> TmuxSession:
    return TmuxSession(" ".join([llmdeck_command(), *args]),
                       env={"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1"})


def test_chat_in_tmux_survives_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tmux = _start(home)
    try:
        tmux.wait_for(lambda s: READY in s, 90, "the bundled model to be ready")
        tmux.send_line("What is the capital of France?")  # text and Enter in one burst
        tmux.wait_for(reply_started, 10, "reply text from the model within 10 s")
        tmux.send("Escape")  # stop it: the bundled 270M base model rambles
        screen = tmux.wait_for(lambda s: "tok/s" in s, 15, "the stats line after stopping")
        assert "You" in screen and "Assistant" in screen
        workers = worker_pids(tmux.pane_pid())
        assert workers, "the model must run in a worker process"
        tmux.send("C-q")
        tmux.wait_for(lambda s: "Assistant" not in s, 15, "the app to quit")
        svc.workers_stay_with_the_service(workers, home)  # then stopped: a cold restart
    finally:
        tmux.close()

    tmux = _start(home)
    try:
        tmux.wait_for(lambda s: "What is the capital of" in s and READY in s, 60,
                      "the sidebar to list the chat")
        tmux.send("C-f")
        tmux.send("Tab")  # from the search box to the conversation list
        tmux.send("Enter")
        screen = tmux.wait_for(lambda s: "Assistant" in s and "You" in s, 15,
                               "the conversation to open with both messages")
        assert "What is the capital of France?" in screen
        tmux.send("C-q")
    finally:
        tmux.close()


def test_newline_key_works_over_a_plain_terminal(tmp_path: Path) -> None:
    tmux = _start(tmp_path)
    try:
        tmux.wait_for(lambda s: "Newline" in s, 30, "the footer")
        tmux.type("first line")
        tmux.send("C-j")
        tmux.type("second line")
        screen = tmux.wait_for(lambda s: "second line" in s, 10, "the second line")
        lines = [ln for ln in screen.splitlines() if "first line" in ln or "second line" in ln]
        assert len(lines) == 2, screen  # two rows, not sent
        assert "You" not in screen
        tmux.send("C-q")
    finally:
        tmux.close()


def test_killing_the_in_process_app_leaves_no_worker(tmp_path: Path) -> None:
    """`llmdeck --in-process` owns its workers (the service's client leaves its models to
    the service: test_chat_in_tmux_survives_a_restart; a killed service leaves none:
    test_service_lifecycle.py)."""
    tmux = _start(tmp_path, "--in-process")
    try:
        tmux.wait_for(lambda s: READY in s, 90, "the model to be ready")
        shell = tmux.pane_pid()
        workers = worker_pids(shell)
        assert workers
        import psutil

        app = [p for p in psutil.Process(shell).children() if "llmdeck" in " ".join(p.cmdline())]
        assert app, "llmdeck must be running in the pane"
        os.kill(app[0].pid, signal.SIGKILL)
        assert wait_gone(workers, 5) == []
    finally:
        tmux.close()


def test_missing_model_shows_an_error_and_the_app_keeps_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / "config"
    config.mkdir(parents=True)
    gone = home / "data" / "models" / "gemma-3-270m-q4_k_m.gguf"  # deleted by the user
    (config / "config.toml").write_text(f'model = "{gone}"\n', encoding="utf-8")
    tmux = _start(home)
    try:
        tmux.wait_for(lambda s: "failed" in s, 30, "the load failure in the status bar")
        tmux.send_line("Are you there?")
        screen = tmux.wait_for(lambda s: "Model file not found" in s and "Are you there?" in s, 30,
                               "the error in the chat view, under the kept message")
        chat = "\n".join(line[CHAT_COLUMN - 2 :] for line in screen.splitlines())
        assert "Are you there?" in chat and "Model file not found" in chat
        tmux.type("still typing")
        tmux.wait_for(lambda s: "still typing" in s, 10, "the app to keep taking keys")
        tmux.send("C-q")
    finally:
        tmux.close()
