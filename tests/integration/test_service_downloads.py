"""Downloads are the engine service's jobs (issue 45 item 1): `llmdeck pull` in tmux, the
tmux server killed, and the file still completes and verifies; a service stopped in the
middle of a pull resumes it when it starts again (from where it stopped, not from zero);
any client lists and cancels jobs.

Real processes throughout: the service (`llmdeck service start`, scripted engine), tmux,
and the loopback fake Hub (HF_ENDPOINT), throttled so a pull takes a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.hub_repos import make_gguf
from tests.fakes.hub_server import FakeHub
from tests.helpers import service_proc as svc
from tests.helpers.tmux import TmuxSession, llmdeck_command

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
REPO, FILE = "acme/Slow-GGUF", "slow-Q8_0.gguf"
SIZE = 3 * 2**20
ID = "slow:q8_0"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[FakeHub]:
    source = make_gguf(tmp_path / "src" / FILE, SIZE)
    fake = FakeHub()
    fake.add_repo(REPO, {FILE: source}, library_name="gguf", tags=["gguf"])
    fake.throttle_bps = 600_000  # ~5 s for the file: time to kill a terminal mid-pull
    with fake:
        yield fake


@pytest.fixture
def env(hub: FakeHub, llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    values = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
              "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(llmdeck_home / "hf-home"),
              "HF_TOKEN": "", "LLMDECK_IN_PROCESS": "0"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    with svc.no_service_left(llmdeck_home):
        yield {"LLMDECK_HOME": str(llmdeck_home), **values}


def _jobs() -> list[dict]:
    sock = svc.raw_client()
    try:
        sock.sendall(b'{"id": 1, "call": "downloads", "args": {}}\n')
        return json.loads(svc.read_line(sock))["result"]
    finally:
        sock.close()


def _model_row() -> str | None:
    listed = svc.llmdeck("models", "list")
    return next((line for line in listed.stdout.splitlines() if line.startswith(ID)), None)


def _verified(hub: FakeHub, source: Path) -> None:
    from core.hub import list_local_models

    [model] = [m for m in list_local_models() if m.model_id == ID]
    assert model.valid and model.verified
    assert hashlib.sha256(model.path.read_bytes()).digest() == \
        hashlib.sha256(source.read_bytes()).digest()


def test_a_pull_outlives_the_terminal_that_started_it(hub: FakeHub, env: dict,
                                                      tmp_path: Path) -> None:
    svc.start(*svc.scripted_args())
    tmux = TmuxSession(f"{llmdeck_command()} pull {REPO} {FILE}", env=env)
    try:
        tmux.wait_for(lambda s: "runs in the llmdeck service" in s and "%" in s, 60,
                      "the pull to start in the service")
    finally:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], check=False)
    running = [j for j in _jobs() if j["repo"] == REPO]
    assert running and running[0]["state"] in ("planning", "downloading"), running
    svc.wait_for(lambda: any(j["state"] == "done" for j in _jobs()), 60,
                 "the download to finish with its terminal gone")
    assert _model_row() is not None and _model_row().rstrip().endswith("ok")
    _verified(hub, tmp_path / "src" / FILE)


def test_a_stopped_service_resumes_the_pull_where_it_stopped(hub: FakeHub, env: dict,
                                                             tmp_path: Path) -> None:
    svc.start(*svc.scripted_args())
    sock = svc.raw_client()
    sock.sendall(json.dumps({"id": 1, "call": "download_start",
                             "args": {"repo": REPO, "file": FILE}}).encode() + b"\n")
    job = json.loads(svc.read_line(sock))["result"]
    sock.close()
    svc.wait_for(lambda: any(j["downloaded"] > SIZE // 4 for j in _jobs()), 30,
                 "a quarter of the file")
    stopped = svc.llmdeck("service", "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    served_before = hub.served(REPO, FILE)
    assert served_before < SIZE
    svc.start(*svc.scripted_args())  # no client asks: the service resumes it by itself
    svc.wait_for(lambda: any(j["id"] == job["id"] and j["state"] == "done" for j in _jobs()),
                 60, "the resumed download to finish")
    assert hub.served(REPO, FILE) < SIZE + SIZE // 2, "resumed with a Range, not from zero"
    _verified(hub, tmp_path / "src" / FILE)


def test_any_client_cancels_a_job_and_bad_calls_say_why(hub: FakeHub, env: dict) -> None:
    svc.start(*svc.scripted_args())
    sock = svc.raw_client()
    try:
        sock.sendall(b'{"id": 1, "call": "download_start", "args": {"repo": 5}}\n')
        assert "repo must be" in json.loads(svc.read_line(sock))["error"]["message"]
        sock.sendall(json.dumps({"id": 2, "call": "download_start",
                                 "args": {"repo": REPO, "file": FILE}}).encode() + b"\n")
        job = json.loads(svc.read_line(sock))["result"]
    finally:
        sock.close()
    svc.wait_for(lambda: any(j["downloaded"] > 0 for j in _jobs()), 30, "the pull to start")
    cancelled = svc.llmdeck("models", "pull", "--cancel", job["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    svc.wait_for(lambda: [j["state"] for j in _jobs()] == ["cancelled"], 10, "the cancel")
    again = svc.llmdeck("models", "pull", "--cancel", job["id"])
    assert again.returncode == 2 and "No download" in again.stderr
    listed = svc.llmdeck("models", "downloads")
    assert job["id"] in listed.stdout and "cancelled" in listed.stdout
    assert os.environ["LLMDECK_IN_PROCESS"] == "0"


def test_the_hubs_download_is_the_services_and_outlives_the_app(hub: FakeHub, env: dict,
                                                                 tmp_path: Path) -> None:
    """The hub screen's `d` in the real app (the service's client, in tmux): the download
    row follows the service's job, and killing the terminal does not stop it."""
    svc.start(*svc.scripted_args())
    tmux = TmuxSession(llmdeck_command(), env=env)
    try:
        tmux.wait_for(lambda s: "scripted" in s, 60, "the app attached to the service")
        tmux.send("C-o")
        tmux.wait_for(lambda s: "Model hub" in s, 30, "the hub")
        tmux.send("C-t")
        tmux.wait_for(lambda s: "Enter lists a repo" in s, 30, "the search tab")
        tmux.type("slow")
        tmux.send("Enter")
        tmux.wait_for(lambda s: REPO in s and "1 repo ·" in s, 30, "the search")
        for _ in range(3):  # the results take the focus once listed; until then Enter waits
            tmux.send("Enter")
            try:
                tmux.wait_for(lambda s: FILE in s and "Q8_0" in s, 10, "the file list")
                break
            except AssertionError:
                continue
        tmux.send("d")
        tmux.wait_for(lambda s: "%" in s and "slow-Q8_0" in s, 30, "the download row")
    finally:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], check=False)
    assert [j["repo"] for j in _jobs()] == [REPO]
    svc.wait_for(lambda: any(j["state"] == "done" for j in _jobs()), 60,
                 "the download to finish with the app gone")
    _verified(hub, tmp_path / "src" / FILE)


def test_a_job_asked_to_load_its_model_loads_it_when_on_disk(
        env: dict, bundled_gguf: Path, hub: FakeHub) -> None:
    """download_start(load=True): the service switches its model to the download once it
    is on disk and verified (the real bundled GGUF under a new name, llama.cpp)."""
    hub.throttle_bps = None
    hub.add_repo("acme/gemma-3-270m-it-GGUF", {"gemma-3-270m-it-Q4_K_M.gguf": bundled_gguf},
                 library_name="gguf", tags=["gguf"])
    svc.start(*svc.scripted_args())
    sock = svc.raw_client()
    try:
        sock.sendall(json.dumps({"id": 1, "call": "download_start", "args": {
            "repo": "acme/gemma-3-270m-it-GGUF", "load": True}}).encode() + b"\n")
        assert json.loads(svc.read_line(sock))["result"]["load"] is True

        def model() -> dict:
            sock.sendall(b'{"id": 2, "call": "model_state", "args": {}}\n')
            while True:
                line = json.loads(svc.read_line(sock))
                if line.get("id") == 2:
                    return line["result"]

        state = svc.wait_for(lambda: (m := model())["label"] == "gemma3:270m-it-q4_k_m"
                             and m["state"] in ("ready", "failed") and m, 120,
                             "the downloaded model loaded")
        assert state["state"] == "ready", state.get("error")
    finally:
        sock.close()


def test_a_pull_into_a_pipe_says_100_percent_when_the_bytes_are_in_then_verifies(
        hub: FakeHub, env: dict) -> None:
    """No terminal (a log, CI): a line each tenth at most, 100% while still downloading,
    then "verifying", then "done", and never a line going back (it printed every update,
    a "downloading" after "verifying", and a fast pull's first 100% said "verifying")."""
    svc.start(*svc.scripted_args())
    pulled = svc.llmdeck("pull", REPO, FILE)
    assert pulled.returncode == 0, pulled.stderr
    rows = [line.split("] ", 1)[1].split() for line in pulled.stderr.splitlines()
            if line.startswith("[")]
    states = [row[-2] for row in rows]  # "100.0%" "3.1" "MB/3.1" ... STATE FILE
    fetching = [float(row[0].rstrip("%")) for row in rows if row[-2] == "downloading"]
    assert fetching == sorted(set(fetching)) and len(fetching) <= 11, rows
    assert fetching[-1] == 100.0
    after = states[states.index("downloading"):]
    assert after[-2:] == ["verifying", "done"] and after[:-2] == ["downloading"] * len(fetching)
    # the last line names the model as F5, `models list` and the API do (issue 45)
    assert pulled.stderr.splitlines()[-1].startswith("its id: slow:q8_0 "), pulled.stderr


def test_a_pull_that_fails_at_once_says_only_its_error(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 in the service: `llmdeck pull` prints the offline sentence alone and
    exits 1 (it said "download ... runs in the llmdeck service: Ctrl+C leaves it running"
    and drew queued and planning lines of 0 B/0 B before the error that came at once)."""
    from core.hub.endpoint import OFFLINE_SENTENCE

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LLMDECK_IN_PROCESS", "0")
    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args())
        pulled = svc.llmdeck("pull", REPO, FILE)
    assert pulled.returncode == 1, pulled.stderr
    assert pulled.stderr.strip() == f"error: {OFFLINE_SENTENCE}", pulled.stderr
