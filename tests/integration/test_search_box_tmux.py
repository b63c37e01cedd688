"""Bytes that are not UTF-8 pasted into the real app in a real terminal (tmux): into the
search box and into the composer. The app keeps running (Textual's input thread died on
them: UnicodeDecodeError, the app exited), shows U+FFFD for them, and still searches."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.tmux import TmuxSession, llmdeck_command

JUNK = b"bread\xff\xfe\xed\xa0\x80\xc3"  # invalid start bytes, a surrogate, a cut sequence


def _paste(tmux: TmuxSession, data: bytes, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(data)
    base = ["tmux", "-L", tmux.socket]
    subprocess.run([*base, "load-buffer", "-b", "junk", str(junk)], check=True)
    subprocess.run([*base, "paste-buffer", "-b", "junk", "-t", tmux.name], check=True)


@pytest.mark.slow
def test_invalid_utf8_pasted_in_the_search_box_and_composer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tmux = TmuxSession(llmdeck_command(), env={"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    try:
        tmux.wait_for(lambda s: "Quit" in s, 60, "the app's first frame")
        tmux.send("C-f")
        _paste(tmux, JUNK, tmp_path)
        tmux.wait_for(lambda s: "bread\ufffd" in s, 10, "the paste shown with U+FFFD")
        tmux.send("C-u")  # clear the box; the app still answers keys
        tmux.type("nothing-here")
        tmux.wait_for(lambda s: "No matches" in s, 10, "a search after the paste")
        tmux.send("Escape")
        tmux.send("C-n")
        _paste(tmux, JUNK, tmp_path)
        tmux.wait_for(lambda s: s.count("bread\ufffd") >= 1 and "Quit" in s, 10,
                      "the composer holding the paste")
        assert "Traceback" not in tmux.screen()
    finally:
        tmux.close()
