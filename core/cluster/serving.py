"""A configured cluster in use by this process: bring it up, or use the one `llmdeck
cluster up` left running (never stopped from here). core.cluster.on_demand makes it the
model of a Runtime ("cluster:NAME", the app's picker and `llmdeck serve --model`), rank 0
streamed through core.remote unchanged.
"""

from __future__ import annotations

import asyncio

from core.cluster.launch import Cluster, ClusterError, current
from core.config import ClusterConfig, Settings

CLUSTER_PREFIX = "cluster:"
# mlx-lm's server answers this name with the model it was started on; any other name
# would make it load that model from the Hub.
SERVED_MODEL = "default_model"


def cluster_ref(model: str | None) -> str | None:
    """The cluster's name in "cluster:NAME"; None for any other model."""
    if not model or not model.startswith(CLUSTER_PREFIX):
        return None
    return model[len(CLUSTER_PREFIX):] or None


class ClusterRun:
    """A cluster in use by this process; `close` stops it when this process started it."""

    def __init__(self, name: str, cluster: Cluster | None, url: str) -> None:
        self.name = name
        self.cluster = cluster  # None: another process's cluster, used as it is
        self.url = url

    async def ended(self, within_s: float) -> str | None:
        """How another process's cluster ended, read from its state file (mlx.launch stops
        every rank and exits when one dies, which the file's reader sees by pid)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            state = current(self.name)
            if state is not None and state.state == "failed":
                return state.error
            if state is None or state.state == "down":
                return (f"Cluster {self.name!r} was stopped (llmdeck cluster down); start it "
                        f"again with `llmdeck cluster up {self.name}`.")
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self.cluster is not None:
            await self.cluster.down()


def configured(settings: Settings, name: str) -> ClusterConfig:
    """The configuration of cluster `name`; an unknown name raises ClusterError naming the
    configured ones (serve checks this before it listens)."""
    cfg = settings.cluster(name)
    if cfg is None:
        names = ", ".join(c.name for c in settings.clusters)
        raise ClusterError(f"No cluster named {name!r} is configured"
                           f"{f' (configured: {names})' if names else ''}; add it under "
                           "[[clusters]] in settings (see the README, 'Several Macs').")
    return cfg


async def up_or_running(settings: Settings, name: str) -> ClusterRun:
    """The configured cluster `name`: the one already up (not ours to stop), else one we
    start. An unknown name raises ClusterError naming the configured ones."""
    cfg = configured(settings, name)
    running = current(name)
    if running is not None and running.state == "up":
        return ClusterRun(name, None, running.url)
    cluster = Cluster(cfg)
    state = await cluster.up()
    return ClusterRun(name, cluster, state.url)
