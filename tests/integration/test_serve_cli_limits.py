"""The `llmdeck serve` command line under connection floods and during its model load.

Real subprocesses: the descriptors a flood costs are counted in /proc of the server
process, and what it prints is read from its own stdout and stderr.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
from openai import OpenAI

from tests.fixtures.serve import scripted_args, spawn_serve

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts fds in /proc")

FLOOD = 1000
CAP = 32


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_flood_of_idle_connections_stays_under_the_cap_and_the_server_keeps_serving(
        tmp_path: Path) -> None:
    proc, url = spawn_serve(tmp_path, *scripted_args(reply="Fine."), "--max-connections", str(CAP),
                            "--idle-timeout", "120")
    host, port = url.removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
    flood: list[socket.socket] = []
    try:
        baseline = open_fds(proc.pid)
        for _ in range(FLOOD):
            flood.append(socket.create_connection((host, int(port))))
        client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        reply = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Fine."
        assert open_fds(proc.pid) <= baseline + CAP + 2, "each connection past the cap must close another"
        assert httpx.get(url.removesuffix("/v1") + "/health").json()["status"] == "ready"
    finally:
        for sock in flood:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "Traceback" not in out, err[-2000:]
    assert len(err) < 2000, "a flood must not fill the log"


def test_stopping_during_the_load_says_so_and_health_said_loading(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text("contxt_size = 8192\n", encoding="utf-8")
    proc, url = spawn_serve(tmp_path, *scripted_args(hang_load_s=60), ready=False)
    try:
        health = httpx.get(url.removesuffix("/v1") + "/health", timeout=10)
        assert health.status_code == 503
        assert health.json()["status"] == "loading" and health.json()["error"] is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert "stopped while model 'scripted' was still loading" in out, out
    assert "failed: None" not in out and "failed" not in out
    assert "llmdeck serve: settings: unknown setting 'contxt_size' ignored" in err, err
