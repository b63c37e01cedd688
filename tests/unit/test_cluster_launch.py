"""How a [[clusters]] entry becomes an mlx.launch command line, how the rank that brought
a cluster down is told from mlx.launch's log, and which processes `down` may signal (real
sleeping processes standing in for mlx.launch and a rank)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.cluster.launch import (
    ClusterError,
    culprit,
    hosts_of,
    launch_command,
    rank_exits,
    stop_processes,
)
from core.cluster.state import ClusterState, RankState
from core.config import ClusterConfig


def test_a_loopback_ring_runs_mlx_lm_server_under_mlx_launch() -> None:
    cfg = ClusterConfig(name="loop", model="/m", hosts=["127.0.0.1", "127.0.0.1"])
    cmd = launch_command(cfg, hosts_of(cfg), 8123, 40000)
    assert cmd[cmd.index("--backend") + 1] == "ring"
    assert cmd[cmd.index("--python") + 1] == sys.executable
    assert cmd[cmd.index("--hosts") + 1] == "127.0.0.1,127.0.0.1"
    assert cmd[cmd.index("--starting-port") + 1] == "40000"
    rank_program = cmd[cmd.index("--") + 1:]
    assert rank_program == ["-m", "mlx_lm", "server", "--model", "/m", "--host", "127.0.0.1",
                            "--port", "8123"]


def test_pipeline_and_a_hostfile_pass_through(tmp_path: Path) -> None:
    hostfile = tmp_path / "h.json"
    hostfile.write_text(json.dumps({"backend": "jaccl", "hosts": [
        {"ssh": "mac1", "ips": ["10.0.0.1"], "rdma": [None, "rdma_en3"]},
        {"ssh": "mac2", "ips": ["10.0.0.2"], "rdma": ["rdma_en3", None]}]}))
    cfg = ClusterConfig(name="tb5", model="/m", hostfile=str(hostfile), backend="jaccl",
                        mode="pipeline", python="/opt/py/bin/python")
    hosts = hosts_of(cfg)
    assert [(h.ssh, h.ip, h.local) for h in hosts] == [("mac1", "10.0.0.1", False),
                                                       ("mac2", "10.0.0.2", False)]
    cmd = launch_command(cfg, hosts, 8080, 0)
    assert cmd[cmd.index("--hostfile") + 1] == str(hostfile)
    assert "--starting-port" not in cmd  # jaccl has no ring ports
    assert cmd[-1] == "--pipeline"
    assert cmd[cmd.index("--host") + 1] == "10.0.0.1"  # rank 0 answers on its own IP


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"hosts": [{"ssh": "a"}]}', '{"hosts": 5}', "[" * 100_000,
    '[{"ssh": "mac1"}, {"ssh": "-oProxyCommand=touch /tmp/x"}]',
    '[{"ssh": "mac1"}, {"ssh": "mac2", "ips": ["1.2.3.4; reboot"]}]'])
def test_a_hostfile_that_names_no_two_hosts_is_a_sentence(tmp_path: Path, text: str) -> None:
    hostfile = tmp_path / "h.json"
    hostfile.write_text(text)
    cfg = ClusterConfig(name="c", model="/m", hostfile=str(hostfile))
    with pytest.raises(ClusterError) as refused:
        hosts_of(cfg)
    assert "Cluster 'c'" in refused.value.message and str(hostfile) in refused.value.message


LOG = ["\x1b[33m[WARN] Node with rank 0 exited with code 1 \x1b[0m",
       "\x1b[33m[WARN] Node with rank 1 exited with code -9 \x1b[0m",
       "[WARN] Node with rank 2 exited with code -15"]


def test_the_rank_killed_from_outside_is_blamed_not_the_peer_that_lost_it() -> None:
    exits = rank_exits(LOG)
    assert exits == [(0, 1), (1, -9), (2, -15)]
    assert culprit(exits, []) == (1, -9)


def test_without_a_signal_the_rank_seen_gone_first_is_blamed() -> None:
    exits = [(0, 1), (1, 1), (2, -15)]
    assert culprit(exits, [1]) == (1, 1)
    assert culprit(exits, [0, 1]) == (0, 1)  # both gone at once: the first logged
    assert culprit([], []) is None
    assert culprit([(1, None)], []) == (1, None)  # "was killed": mlx.launch's own stop


def _sleeper(*marks: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *marks],
                            start_new_session=True)


def test_down_signals_only_processes_a_cluster_started() -> None:
    """A state file is outside data: one naming this process, its group, pid 1 or an
    unrelated process (a recycled pid) must not get them killed."""
    stranger = _sleeper()
    try:
        state = ClusterState(name="c", state="up", launcher_pid=stranger.pid, ranks=[
            RankState(0, "127.0.0.1", os.getpid()), RankState(1, "127.0.0.1", 1),
            RankState(2, "127.0.0.1", os.getpgrp())])
        assert stop_processes(state, grace_s=0.5) == []
        assert stranger.poll() is None  # still running
    finally:
        stranger.kill()
        stranger.wait()


def test_down_stops_a_launcher_group_and_checks_each_pid() -> None:
    import psutil

    # Stands in for mlx.launch: leads its own group and starts a "rank" in it.
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; r = subprocess.Popen([sys.executable, "
         "'-c', 'import time; time.sleep(60)', 'mlx_lm']); print(r.pid, flush=True); time.sleep(60)",
         "mlx.launch"], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert launcher.stdout is not None
        rank = int(launcher.stdout.readline())
        state = ClusterState(name="c", state="up", launcher_pid=launcher.pid,
                             ranks=[RankState(0, "127.0.0.1", rank)])
        assert stop_processes(state, grace_s=2.0) == []
        assert launcher.wait(5) == -signal.SIGTERM
        assert not psutil.pid_exists(rank) or psutil.Process(rank).status() == psutil.STATUS_ZOMBIE
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
