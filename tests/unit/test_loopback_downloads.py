"""The in-process app's service (core.service.loopback) runs the download jobs as the
service process does: `d` in the hub of `llmdeck --in-process` asked the loopback for a
job and its row stayed at "0% · waiting", because nothing pushed the job's progress to
the clients subscribed to "downloads" (the loopback never opened the jobs)."""

from __future__ import annotations

import asyncio
from typing import Any

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from core.service import Loopback


async def test_a_loopback_clients_download_job_is_pushed_to_it_to_its_end() -> None:
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096)
    rt = Runtime(Settings(), model_spec=spec)
    await rt.start(preload=False)
    loop = await Loopback.open(rt)
    pushed: list[list[dict[str, Any]]] = []
    ended = asyncio.Event()

    def on_event(message: dict[str, Any]) -> None:
        if message.get("event") == "downloads":
            pushed.append(message["data"])
            if any(job["state"] in ("done", "error", "cancelled") for job in message["data"]):
                ended.set()

    try:
        loop.client.listeners.append(on_event)
        assert await loop.client.call("subscribe", topic="downloads") == []
        # Hugging Face is offline in the tests: the listing fails, the job ends in error.
        job = await loop.client.call("download_start", repo="acme/Nowhere-GGUF")
        await asyncio.wait_for(ended.wait(), 30)
        [last] = pushed[-1]
        assert last["id"] == job["id"] and last["state"] == "error" and last["error"]
    finally:
        await loop.close()
        await rt.close()
