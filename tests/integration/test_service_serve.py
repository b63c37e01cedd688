"""`llmdeck serve` is the engine service's HTTP face: beside a client of the service it
adds no worker and no copy of the model; its listener closes when it stops, or dies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from core.events import TextDelta
from core.service import RemoteRuntime, connect
from tests.fixtures.serve import after_banner
from tests.helpers import service_proc as svc
from tests.helpers.procs import worker_pids


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def _serve() -> tuple[subprocess.Popen[str], str, int]:
    env = {**os.environ, "PYTHONPATH": str(svc.ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "--port", "0"],
                            cwd=svc.ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+) \(in the llmdeck service, pid (\d+)\)", line)
    assert match, line + proc.stdout.read()
    assert "ready" in after_banner(proc.stdout)
    return proc, match.group(1), int(match.group(2))


def _chat(url: str) -> str:
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(f"{url}/chat/completions", body.encode(),
                                      {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["choices"][0]["message"]["content"]


async def test_serve_shares_the_services_pool(llmdeck_home: Path) -> None:
    pid = svc.start(*svc.scripted_args(reply="One copy."))
    app = RemoteRuntime(await connect("tui"))
    await app.start()
    try:
        turn = await app.start_turn(None, "from the app")
        assert "".join([e.text async for e in turn.events() if isinstance(e, TextDelta)]) \
            == "One copy."
        workers_before = worker_pids(pid)
        assert len(workers_before) == 1

        serve, url, served_by = _serve()
        try:
            assert served_by == pid
            assert _chat(url) == "One copy."
            assert worker_pids(pid) == workers_before, "serve loaded no second copy"
            assert psutil.Process(serve.pid).children(recursive=True) == [], \
                "serve runs no worker of its own"
            table = svc.llmdeck("workers").stdout
            assert sum(1 for row in table.splitlines() if " scripted " in row) == 1, table
            assert (await app.service_status())["http"] == url
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(30) == 0
        finally:
            if serve.poll() is None:
                serve.kill()
        with pytest.raises(urllib.error.URLError):
            _chat(url)
        assert svc.alive(pid), "the service outlives serve while the app uses it"
        assert (await app.service_status())["http"] is None

        serve, url, _ = _serve()  # killed outright: the service closes its listener
        serve.kill()
        serve.wait(10)
        svc.wait_for(lambda: svc.alive(pid) and svc.llmdeck("service", "status").stdout.find(
            "http ") < 0, 15, "the listener of a killed serve closed")
    finally:
        await app.close()


def test_serve_alone_starts_the_service_and_stops_it_on_the_way_out(llmdeck_home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(svc.ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "--port", "0",
                             *svc.scripted_args(reply="Alone.")], cwd=svc.ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+) \(in the llmdeck service, pid (\d+)\)", line)
    assert match, line
    pid = int(match.group(2))
    assert "ready" in after_banner(proc.stdout)
    assert _chat(match.group(1)) == "Alone."
    workers = worker_pids(pid)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    svc.wait_for(lambda: not svc.alive(pid), 30, "the service serve started to stop")
    assert svc.wait_for(lambda: all(not svc.alive(w) for w in workers), 10, "workers gone")


def test_serve_says_it_lost_its_engine_when_the_service_stops(llmdeck_home: Path) -> None:
    """`llmdeck service stop` under a running `serve`: it says so and that its API is
    closed, and exits (issue 42)."""
    svc.start(*svc.scripted_args(reply="Here."))
    serve, url, _ = _serve()
    try:
        assert svc.llmdeck("service", "stop").returncode == 0
        assert serve.wait(30) == 1
        said = serve.stdout.read() if serve.stdout is not None else ""
        assert "lost its engine" in said and f"The API on {url} is closed" in said, said
    finally:
        if serve.poll() is None:
            serve.kill()
