"""The service's download jobs are bounded: a client asking for thousands is refused past
MAX_UNFINISHED with a sentence, and a hostile or damaged downloads.json (nested past
json's recursion limit, huge, or listing thousands) resumes a bounded list or nothing,
and never stops the service from starting (it exited at start with "maximum recursion
depth exceeded while decoding a JSON array")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.hub.jobs import MAX_STATE_BYTES, MAX_UNFINISHED, DownloadJobs, TooManyDownloads


async def test_more_unfinished_jobs_than_the_bound_are_refused_with_a_sentence(
        tmp_path: Path) -> None:
    jobs = DownloadJobs(tmp_path / "downloads.json")
    try:
        for i in range(MAX_UNFINISHED):  # queued: none runs before this test awaits
            jobs.start(f"owner/repo-{i}", "model.gguf")
        assert jobs.start("owner/repo-0", "model.gguf").id == jobs.jobs[0].id  # the same job
        with pytest.raises(TooManyDownloads, match="cancel one"):
            jobs.start("owner/one-more", "model.gguf")
        assert len(jobs.jobs) == MAX_UNFINISHED
        saved = json.loads((tmp_path / "downloads.json").read_text())
        assert len(saved) == MAX_UNFINISHED
    finally:
        await jobs.close()


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    json.dumps([{"repo": "owner/repo", "file": "x" * 200}] * (MAX_STATE_BYTES // 200)),
], ids=["nested-deep", "huge"])
async def test_a_hostile_state_file_resumes_nothing_and_raises_nothing(
        tmp_path: Path, text: str) -> None:
    state = tmp_path / "downloads.json"
    state.write_text(text)
    jobs = DownloadJobs(state)
    try:
        assert jobs.resume() == 0
    finally:
        await jobs.close()


async def test_a_state_file_listing_thousands_resumes_the_bound(tmp_path: Path) -> None:
    state = tmp_path / "downloads.json"
    state.write_text(json.dumps([{"repo": f"o/r{i}", "file": "m.gguf"} for i in range(5000)]))
    jobs = DownloadJobs(state)
    try:
        assert jobs.resume() == MAX_UNFINISHED
    finally:
        await jobs.close()
