"""The hub's rows for the service's download jobs: a job started elsewhere (`llmdeck pull
owner/repo`, which names no file) showed as "owner/repo (MLX)" for a GGUF repo, and its
"Download finished" named the repo: the row knew only the file that was asked for (none),
not the one the service planned."""

from __future__ import annotations

from typing import Any

from tui.hub_service_queue import ServiceDownloadQueue
from tui.widgets.hub_format import job_title

REPO, FILE = "acme/Tiny-Gemma-3-270M-GGUF", "tiny-gemma-3-270m-Q4_K_M.gguf"


def _job(state: str, **planned: Any) -> dict[str, Any]:
    return {"id": "dl-1", "repo": REPO, "file": None, "revision": None, "state": state,
            "filename": FILE, "downloaded": 10, "total": 10, "path": None, **planned}


def test_a_pull_that_named_no_file_shows_the_gguf_the_service_picked() -> None:
    seen: list[str] = []
    queue = ServiceDownloadQueue(lambda: None, on_update=lambda job, _p: seen.append(
        job_title(job.plan.repo_id, job.plan.primary)))
    queue._show([_job("planning", format=None, primary=None)])  # noqa: SLF001
    queue._show([_job("done", format="gguf", primary=FILE)])  # noqa: SLF001
    [job] = queue.jobs
    assert (job.plan.format, job.plan.primary) == ("gguf", FILE)
    assert seen[-1] == f"{REPO} · {FILE}", seen


def test_an_mlx_repo_stays_the_repo_as_a_whole() -> None:
    queue = ServiceDownloadQueue(lambda: None)
    queue._show([_job("done", format="mlx", primary="")])  # noqa: SLF001
    [job] = queue.jobs
    assert job_title(job.plan.repo_id, job.plan.primary) == f"{REPO} (MLX)"
