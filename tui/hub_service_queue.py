"""The hub's download queue when the app is the engine service's client (issue 45).

The downloads are the service's jobs (core.hub.jobs): `d` asks the service, the rows show
what it pushes ("downloads" events), and `c` cancels there. So a download started here
goes on when this terminal goes, and one started anywhere else (`llmdeck pull`, another
window, Ollama's /api/pull) shows here too. It has DownloadQueue's face (jobs with a
`plan` and a `latest` progress; add, cancel, active), so the hub screen works with
either; an app running its own engine keeps the in-process DownloadQueue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from core.wire.hub import HUB_ERROR_CODES, DownloadPlan, DownloadProgress, HubError

OnUpdate = Callable[[Any, DownloadProgress], None]
_STATES = ("queued", "downloading", "verifying", "done", "error", "cancelled")


class ServiceJob:
    """One of the service's jobs as the hub screen sees it."""

    def __init__(self, plan: DownloadPlan, job_id: str | None = None) -> None:
        self.plan = plan
        self.id = job_id
        self.latest = DownloadProgress(plan.repo_id, plan.primary, 0, len(plan.files), 0,
                                       plan.total_bytes, 0.0, None, "queued")

    @property
    def started(self) -> bool:
        return self.latest.state != "queued"


def progress_of(job: dict[str, Any], plan: DownloadPlan) -> DownloadProgress:
    """A pushed job dict as the DownloadProgress the rows draw."""
    state = job.get("state") if job.get("state") in _STATES else "queued"
    error = None
    if state in ("error", "cancelled"):
        code = job.get("error_code")
        code = code if code in HUB_ERROR_CODES else "CANCELLED" if state == "cancelled" else "HTTP"
        error = HubError(code, str(job.get("error") or state))
    total = int(job.get("total") or plan.total_bytes or 0)
    return DownloadProgress(plan.repo_id, str(job.get("filename") or plan.primary), 0,
                            max(1, len(plan.files)), int(job.get("downloaded") or 0), total,
                            float(job.get("rate_bps") or 0.0), job.get("eta_s"), state,
                            error=error, path=job.get("path"), stalled_s=job.get("stalled_s"))


class ServiceDownloadQueue:
    """DownloadQueue's face over the service's download jobs."""

    def __init__(self, client: Callable[[], Any], on_update: OnUpdate | None = None) -> None:
        self._client = client  # the service client now (a reconnect makes a new one)
        self._on_update = on_update
        self.jobs: list[ServiceJob] = []
        self._subscribed: Any = None  # the client the "downloads" topic is asked of

    def start(self) -> None:
        """Show the service's jobs now and follow them (call on the app's loop)."""
        asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        client = self._client()
        if client is None or client is self._subscribed:
            return
        self._subscribed = client
        client.listeners.append(self._event)
        try:
            jobs = await client.call("subscribe", topic="downloads")
        except Exception:  # noqa: BLE001 - the service went: the next add asks again
            self._subscribed = None
            return
        self._show(jobs)

    def _event(self, message: dict[str, Any]) -> None:
        if message.get("event") == "downloads":
            self._show(message.get("data") or [])

    def _show(self, jobs: Any) -> None:
        for data in jobs if isinstance(jobs, list) else []:
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                continue
            view = next((j for j in self.jobs if j.id == data["id"]), None)
            if view is None:  # started by another client, or before this window opened
                view = next((j for j in self.jobs if j.id is None and j.plan.repo_id ==
                             data.get("repo")), None)
            if view is None:
                file = data.get("file") or ""
                view = ServiceJob(DownloadPlan(str(data.get("repo")), data.get("revision")
                                               or "main", "gguf" if file else "mlx", file, ()),
                                  data["id"])
                self.jobs.append(view)
            view.id = data["id"]
            planned = data.get("primary")
            if isinstance(planned, str) and data.get("format") in ("gguf", "mlx") \
                    and (planned, data["format"]) != (view.plan.primary, view.plan.format):
                # a pull that named no file: the service picked it (its row and its
                # "Download finished" name the model, not the repo as "MLX")
                view.plan = DownloadPlan(view.plan.repo_id, view.plan.revision,
                                         data["format"], planned, view.plan.files)
            view.latest = progress_of(data, view.plan)
            if self._on_update is not None:
                self._on_update(view, view.latest)

    def add(self, plan: DownloadPlan) -> ServiceJob:
        """Ask the service for the download; its rows follow from what it pushes."""
        view = ServiceJob(plan)
        self.jobs.append(view)
        if self._on_update is not None:
            self._on_update(view, view.latest)
        asyncio.ensure_future(self._start(view))
        return view

    async def _start(self, view: ServiceJob) -> None:
        await self._follow()
        client = self._client()
        try:
            if client is None:
                raise ConnectionError("no engine service")
            job = await client.call("download_start", repo=view.plan.repo_id,
                                    file=view.plan.primary or None)
        except Exception as exc:  # noqa: BLE001 - the row says why
            view.latest = DownloadProgress(
                view.plan.repo_id, view.plan.primary, 0, 1, 0, view.plan.total_bytes, 0.0, None,
                "error", error=HubError("HTTP", f"The engine service did not take "
                                        f"the download: {exc}"))
            if self._on_update is not None:
                self._on_update(view, view.latest)
            return
        self._show([job])

    def cancel(self, job: ServiceJob) -> None:
        if job.id is not None and (client := self._client()) is not None:
            asyncio.ensure_future(_quietly(client.call("download_cancel", job=job.id)))

    @property
    def active(self) -> ServiceJob | None:
        return next((j for j in self.jobs if j.started and not j.latest.finished), None)

    async def join(self) -> None:
        while any(not j.latest.finished for j in self.jobs):
            await asyncio.sleep(0.1)


async def _quietly(call: Any) -> None:
    try:
        await call
    except Exception:  # noqa: BLE001 - finished meanwhile: nothing to cancel
        pass
