"""`llmdeck paths | head -0`: a reader that stops early gets no traceback from llmdeck."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.tmux import llmdeck_command


def test_a_closed_pipe_ends_the_command_quietly(llmdeck_home: Path) -> None:
    reader_gone, writer = os.pipe()
    os.close(reader_gone)  # closed before llmdeck has even started: its first write fails
    try:
        done = subprocess.run([llmdeck_command(), "paths"], stdout=writer,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env={**os.environ, "LLMDECK_HOME": str(llmdeck_home)})
    finally:
        os.close(writer)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141
