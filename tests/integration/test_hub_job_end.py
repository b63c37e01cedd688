"""A download job's end reaches clients whole, in one push: `llmdeck pull` printed "None"
where the model's path goes, because the service pushed the download's last progress
("done") before it had set the job's path from the result, and the client stops at the
first finished state it sees. An error's push likewise came before its sentence."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from core.hub.jobs import DownloadJobs
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub

Q8 = "tiny-chat-Q8_0.gguf"
ENDS = ("done", "error", "cancelled")


async def _first_end(tmp_path: Path) -> dict[str, Any]:
    """Run one pull of Q8 as the service does; the job as first pushed in an end state."""
    seen: list[dict[str, Any]] = []
    ended = asyncio.Event()

    def on_change(jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            if job["state"] in ENDS and not ended.is_set():
                seen.append(dict(job))
                ended.set()

    jobs = DownloadJobs(tmp_path / "downloads.json", on_change=on_change)
    jobs.start(GGUF_REPO, Q8)
    await asyncio.wait_for(ended.wait(), 30)
    await jobs.close()
    return seen[0]


async def test_a_finished_jobs_first_done_push_carries_its_path(fake_hub: FakeHub,
                                                                tmp_path: Path) -> None:
    job = await _first_end(tmp_path)
    assert job["state"] == "done"
    assert job["path"] and Path(job["path"]).name == Q8 and Path(job["path"]).exists()
    assert (job["format"], job["primary"]) == ("gguf", Q8)  # what the hub's row names


async def test_a_failed_jobs_first_error_push_carries_its_sentence(fake_hub: FakeHub,
                                                                   tmp_path: Path) -> None:
    fake_hub.corrupt_file(GGUF_REPO, Q8, times=99)
    job = await _first_end(tmp_path)
    assert job["state"] == "error" and job["error_code"] == "CHECKSUM_MISMATCH"
    assert job["error"] and "nothing was kept" in job["error"]


async def test_a_second_pull_says_nothing_was_downloaded(fake_hub: FakeHub, tmp_path: Path,
                                                        capsys) -> None:
    """`llmdeck pull` of a model already here said "downloaded 253.1 MB" for no byte."""
    from core.service.pull_cli import _report

    first = await _first_end(tmp_path)
    again = await _first_end(tmp_path)
    assert first["fetched"] > 0 and again["fetched"] == 0
    assert _report(again, sys.stderr) == 0
    said = capsys.readouterr()
    assert again["path"] in said.out
    assert "already here" in said.err and "downloaded" not in said.err
