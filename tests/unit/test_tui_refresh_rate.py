"""The app raises Textual's frame-rate cap (tui/__init__.py says why) before Textual reads it."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = "import tui.app, textual.constants as c, textual.screen as s; print(c.MAX_FPS, round(1 / s.UPDATE_PERIOD))"


def _probe(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_app_paints_up_to_240_frames_a_second() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    assert _probe(env) == "240 240"


def test_a_users_textual_fps_wins() -> None:
    assert _probe({**os.environ, "TEXTUAL_FPS": "30"}) == "30 30"
