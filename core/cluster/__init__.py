"""One model across several machines on MLX's own distributed engine (issue 35).

    backend = await open_backend(settings, NAME)  # a Runtime's model "cluster:NAME" (the
                                                  # app's and serve's): stops when idle
`llmdeck cluster up|down|status NAME` is core.cluster.cli. mlx.launch and mlx-lm's
server do the distributed work; this package starts, watches and stops them.
"""

from __future__ import annotations

from core.cluster.launch import Cluster, ClusterError, current, stop_processes
from core.cluster.on_demand import OnDemandClusterBackend, open_backend
from core.cluster.serving import ClusterRun, cluster_ref, configured
from core.cluster.state import ClusterState, RankState, read_state


def clusters_report() -> str | None:
    """The clusters `llmdeck workers` shows under the workers (core.cluster.cli)."""
    from core.cluster.cli import clusters_report as report

    return report()


def cluster_doctor_main(argv: list[str]) -> int:
    """`llmdeck doctor --cluster NAME` (core.cluster.doctor)."""
    from core.cluster.doctor import main

    return main(argv)


def cluster_main(argv: list[str]) -> int:
    from core.cluster.cli import main

    return main(argv)


__all__ = ["Cluster", "ClusterError", "ClusterRun", "ClusterState", "RankState",
           "cluster_doctor_main", "cluster_main", "clusters_report",
           "cluster_ref", "configured", "current", "open_backend", "OnDemandClusterBackend",
           "read_state", "stop_processes"]
