"""The worker-status file for `llmdeck workers`: its temporaries never stay behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.workers import status_file
from core.workers.pool import WorkerStatus
from core.workers.status_file import read_status, sweep_temporary_files, write_status
from tests.fixtures.small_fs import tmpfs_fixture  # noqa: F401


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _status() -> list[WorkerStatus]:
    return [WorkerStatus(worker_id="chat-0", model="m", engine="scripted", state="idle", pid=1,
                         rss_bytes=0, active=0, queued=0, tokens_per_s=0.0, restarts=0)]


def test_a_write_on_a_full_disk_leaves_no_temporary_file(tmpfs) -> None:  # noqa: ANN001
    folder = tmpfs("full", "64k")
    filler = folder / "filler"
    with pytest.raises(OSError) as full:  # fill the filesystem to the last block
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    assert full.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as raised:
        write_status(_status() * 50, folder / "workers.json")
    assert raised.value.errno == errno.ENOSPC
    assert sorted(p.name for p in folder.iterdir()) == ["filler"]
    filler.unlink()
    write_status(_status(), folder / "workers.json")  # space again: it works
    assert read_status(folder / "workers.json")[0][0].worker_id == "chat-0"
    assert sorted(p.name for p in folder.iterdir()) == ["workers.json"]


def test_temporaries_of_dead_processes_are_swept_on_the_first_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _dead_pid()
    stale = [tmp_path / f".workers.json.{dead}.tmp", tmp_path / f".workers-serve.json.{dead}.tmp"]
    live = tmp_path / f".workers.json.{os.getppid()}.tmp"  # another live process's: kept
    other = tmp_path / f".notes.{dead}.tmp"  # not ours: kept
    for path in (*stale, live, other):
        path.write_text("{}")
    monkeypatch.setattr(status_file, "_swept", False)
    write_status(_status(), tmp_path / "workers.json")
    assert not any(p.exists() for p in stale)
    assert live.exists() and other.exists()
    assert sweep_temporary_files(tmp_path) == []


@pytest.mark.parametrize("text", ['[1, 2]', '{"pid": "me"}', '{"pid": 1e400}',
                                  '{"pid": PID, "workers": [{"worker": 1}]}',
                                  '{"pid": PID, "workers": 7}'])  # PID: this live process's,
def test_a_damaged_status_file_is_a_sentence_not_a_crash(tmp_path: Path, text: str) -> None:
    path = tmp_path / "status.json"  # put in here so test ids match across pytest-xdist workers
    path.write_text(text.replace("PID", str(os.getpid())), encoding="utf-8")
    statuses, problem = read_status(path)
    assert statuses == [] and problem is not None and "damaged" in problem and str(path) in problem
