"""The download queue runs jobs one at a time and reports every job's progress."""

from __future__ import annotations

from core.hub import list_files, list_local_models, plan_download
from core.hub.download import DownloadProgress
from core.hub.download_job import DownloadJob
from core.hub.queue import DownloadQueue
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    MLX_REPO,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub


async def test_jobs_run_in_order_and_a_waiting_job_can_be_cancelled(fake_hub: FakeHub) -> None:
    fake_hub.throttle_bps = 8 * 1024 * 1024
    updates: list[tuple[str, DownloadProgress]] = []
    running_at_once: list[int] = []

    def on_update(job: DownloadJob, progress: DownloadProgress) -> None:
        updates.append((job.plan.repo_id, progress))
        running_at_once.append(sum(1 for j in queue.jobs
                                   if j.latest.state in ("downloading", "verifying")))

    queue = DownloadQueue(on_update=on_update)
    first = queue.add(plan_download(list_files(GGUF_REPO), "tiny-chat-Q4_K_M.gguf"))
    second = queue.add(plan_download(list_files(VISION_REPO)))
    third = queue.add(plan_download(list_files(MLX_REPO)))
    queue.cancel(second)  # still waiting: it must not fetch a byte
    await queue.join()

    assert (first.latest.state, second.latest.state, third.latest.state) == (
        "done", "cancelled", "done")
    assert fake_hub.served(VISION_REPO, "tiny-vl-Q4_K_M.gguf") == 0
    assert max(running_at_once) == 1
    order = [repo for repo, p in updates if p.state == "done"]
    assert order == [GGUF_REPO, MLX_REPO]
    ids = {m.repo_id for m in list_local_models(include_bundled=False)}
    assert ids == {GGUF_REPO, MLX_REPO}
