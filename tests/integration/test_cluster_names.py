"""Cluster names and files hold (issue 44 item 7): a name that climbs out (`../../x`) is
refused before any file is read, a state file is read only when it is a plain file
inside the clusters folder whose own `name` is its file's, and a rank that prints
without end fills a bounded, rotated log (core.cluster.log_keeper), not the disk."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cluster import launch
from core.cluster.log_keeper import LOG_BYTES, LOG_FILES
from core.cluster.state import clusters_dir, read_state
from core.config import ClusterConfig
from tests.fixtures.serve import ROOT


def _llmdeck(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMDECK_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)


def _state(name: str) -> dict:
    return {"name": name, "state": "up", "url": "http://127.0.0.1:9/v1", "launcher_pid": 0,
            "ranks": [{"rank": 0, "host": "127.0.0.1", "pid": 0}]}


def test_a_name_that_climbs_out_reads_and_writes_nothing_outside(llmdeck_home: Path) -> None:
    folder = clusters_dir()
    outside = (folder / "../../../outside").resolve()
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "planted-state.json").write_text(json.dumps(_state("../../../outside/written")))
    for action in ("down", "status"):
        done = _llmdeck(llmdeck_home, "cluster", action, "../../../outside/planted-state")
        assert done.returncode == 1, done.stdout
        assert "is not a cluster's name" in done.stderr and "letters, digits" in done.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["planted-state.json"], "nothing written"


def test_a_state_file_is_ours_only_inside_plain_and_named_as_itself(llmdeck_home: Path) -> None:
    folder = clusters_dir()
    (folder / "lab.json").write_text(json.dumps(_state("../../../outside/written")))
    assert read_state("lab") is None, "its name field climbs out"
    (folder / "other.json").write_text(json.dumps(_state("lab")))
    assert read_state("other") is None, "a file naming another cluster"
    target = folder.parent / "elsewhere.json"
    target.write_text(json.dumps(_state("linked")))
    (folder / "linked.json").symlink_to(target)
    assert read_state("linked") is None, "a link is not followed"
    os.mkfifo(folder / "piped.json")
    assert read_state("piped") is None, "a FIFO is not opened for reading (and never blocks)"
    for bad in ("../x", "a/b", "..", "", "x" * 65, "n\x00ul"):
        assert read_state(bad) is None
    (folder / "good.json").write_text(json.dumps({**_state("good"), "log": "/etc/passwd"}))
    good = read_state("good")
    assert good is not None and good.log == str(folder / "good.log"), "the log is ours, not the file's"
    done = _llmdeck(llmdeck_home, "cluster", "down", "lab")
    assert "not a cluster's name" not in done.stderr
    assert not list((folder / "../../..").resolve().glob("outside*")), "nothing written outside"


def test_a_rank_that_prints_without_end_fills_a_bounded_log(llmdeck_home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    chatty = ("import sys\nw = sys.stdout.buffer.write\nfor _ in range(600):\n"
              "    w(b'rank 0 says the same thing again\\n' * 1000)\n"
              "w(b'the last words of rank 0\\n')\nsys.stdout.flush()\nsys.exit(3)\n")
    monkeypatch.setattr(launch, "launch_command", lambda *a: [sys.executable, "-c", chatty])
    cfg = ClusterConfig(name="chatty", model="/models/m", hosts=["127.0.0.1", "127.0.0.1"])
    with pytest.raises(launch.ClusterError) as caught:
        asyncio.run(launch.Cluster(cfg).up(ready_timeout_s=120))
    assert "exited with code 3" in caught.value.message
    assert "the last words of rank 0" in caught.value.message, caught.value.message
    logs = sorted(clusters_dir().glob("chatty.log*"))
    assert 1 <= len(logs) <= LOG_FILES, logs
    sizes = [p.stat().st_size for p in logs]
    assert all(size <= LOG_BYTES for size in sizes), sizes  # 20 MB were printed
