"""A real two-rank ring cluster on loopback (issue 35): mlx.launch runs mlx-lm's server on
two local ranks (CPU) over a tiny random-weight model folder, and `llmdeck serve --model
cluster:NAME` serves it to the official openai client.

What is checked from outside: the cluster's greedy reply equals single-process mlx-lm's;
killing a rank mid-reply ends the reply (its text kept) with a sentence naming the rank's
host, in bounded time, and no rank is left running; `llmdeck cluster down` leaves no
process (each pid checked). A cluster takes ~10-20 s to start on 2 cores: those tests
are marked slow. `llmdeck doctor --cluster` runs its real probe on this machine and a real
ssh to a host that does not resolve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from openai import OpenAI

from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ROOT, spawn_serve

MESSAGES = [{"role": "user", "content": "Count to ten: one two three"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("cluster-model"), QWEN3_SHAPE)


@pytest.fixture
def home(llmdeck_home: Path, model_dir: Path) -> Path:
    config = llmdeck_home / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(
        f'[[clusters]]\nname = "loop"\nhosts = ["127.0.0.1", "127.0.0.1"]\nmodel = "{model_dir}"\n'
        f'python = "{sys.executable}"\n', encoding="utf-8")
    return llmdeck_home


def llmdeck(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMDECK_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def cluster_pids(home: Path) -> list[int]:
    """mlx.launch and every rank, as the state file records them."""
    state = json.loads((home / "data" / "clusters" / "loop.json").read_text())
    return [state["launcher_pid"], *(r["pid"] for r in state["ranks"])]


def running(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def serve_owning_cluster(home: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc, url = spawn_serve(home, "--model", "cluster:loop")
    try:
        yield proc, url
    finally:
        stop(proc)


def single_process_reply(model_dir: Path, max_tokens: int) -> str:
    from mlx_lm import generate, load
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(str(model_dir))
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    return generate(model, tokenizer, prompt=prompt, max_tokens=max_tokens,
                    sampler=make_sampler(temp=0.0))


@pytest.mark.slow
def test_up_serve_chat_equals_single_process_and_down_leaves_no_process(
        home: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main as llmdeck_here  # the CLI in this process: no interpreter start-ups

    reference: list[str] = []  # single-process mlx-lm, loaded while the cluster starts
    worker = threading.Thread(target=lambda: reference.append(single_process_reply(model_dir, 24)))
    worker.start()
    assert llmdeck_here(["cluster", "up", "loop"]) == 0, capsys.readouterr().err
    pids = cluster_pids(home)
    assert len(running(pids)) == 3  # mlx.launch and two ranks
    capsys.readouterr()
    assert llmdeck_here(["cluster", "status", "loop"]) == 0
    assert "127.0.0.1  1     up" in capsys.readouterr().out
    assert llmdeck_here(["workers"]) == 0
    shown = capsys.readouterr().out
    assert "cluster loop: up (ring, tensor)" in shown and "http://127.0.0.1:" in shown, shown
    proc, url = spawn_serve(home, "--model", "cluster:loop")  # uses the running cluster
    try:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0)
        stream = client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                                max_tokens=24, temperature=0, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        worker.join(120)
        assert text == reference[0]
        assert text.strip()
        # a client that hangs up mid-reply cancels it on rank 0; the ranks stay in step
        long = client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                              max_tokens=2000, temperature=0, stream=True)
        for i, _ in enumerate(long):
            if i == 5:
                break
        long.close()
        again = client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                               max_tokens=24, temperature=0)
        assert again.choices[0].message.content == reference[0]
        assert len(running(pids)) == 3
        # down under the server's feet: every rank stops, and the server says so
        assert llmdeck_here(["cluster", "down", "loop"]) == 0, capsys.readouterr().err
        assert running(pids) == []
        with pytest.raises(Exception) as failed:
            stream = client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                                    max_tokens=24, stream=True)
            list(stream)
        assert "Cluster 'loop' was stopped (llmdeck cluster down)" in str(failed.value)
        assert proc.poll() is None
    finally:
        stop(proc)
    assert running(pids) == []
    os.waitpid(pids[0], os.WNOHANG)  # mlx.launch was this process's child: no zombie either
    capsys.readouterr()
    assert llmdeck_here(["cluster", "status", "loop"]) == 1
    assert "cluster loop: down" in capsys.readouterr().out


@pytest.mark.slow
def test_a_rank_killed_mid_reply_ends_it_with_the_host_and_no_rank_left(
        home: Path, serve_owning_cluster: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = serve_owning_cluster
    pids = cluster_pids(home)
    rank1 = pids[2]
    client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
    stream = client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                            max_tokens=3000, temperature=0, stream=True)
    text, error = "", ""
    started = time.monotonic()
    killer = None
    try:
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if killer is None and len(text) > 20:
                killer = threading.Timer(0.0, os.kill, (rank1, signal.SIGKILL))
                killer.start()
                killed_at = time.monotonic()
    except Exception as exc:  # the server ends the stream with an error event
        error = str(exc)
    assert killer is not None, f"the reply ended before the kill: {text!r}"
    elapsed = time.monotonic() - killed_at
    assert elapsed < 15, f"the reply took {elapsed:.1f} s to end after the kill"
    assert len(text) > 20  # the text so far was kept
    # The error arrives as the stream's last event; the openai client raises it.
    # (mlx.launch's log adds "was killed by signal 9" when it wrote its line in time)
    assert "Cluster 'loop' went down: rank 1 on 127.0.0.1" in error, error
    assert "llmdeck cluster up loop" in error
    deadline = time.monotonic() + 10
    while running(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(pids) == [], "a rank outlived the cluster"
    assert proc.poll() is None  # the server itself goes on
    status = llmdeck(home, "cluster", "status", "loop")
    assert status.returncode == 1 and "cluster loop: failed" in status.stdout
    assert "went down: rank 1 on 127.0.0.1" in status.stdout, status.stdout
    assert time.monotonic() - started < 60
    stop(proc)
    assert proc.returncode == 0


@pytest.mark.slow
def test_serve_stops_its_idle_cluster_and_starts_it_for_the_next_request(home: Path) -> None:
    """`serve --model cluster:NAME` stops the cluster it started after idle_minutes with no
    request (every rank gone, by pid) and starts it again for the next request, which is
    answered as the first was; it kept the cluster up until serve exited."""
    config = home / "config" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + "idle_minutes = 0.05\n",
                      encoding="utf-8")  # 3 s
    proc, url = spawn_serve(home, "--model", "cluster:loop")
    try:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)

        def ask() -> str | None:
            return client.chat.completions.create(model="cluster:loop", messages=MESSAGES,
                                                  max_tokens=8, temperature=0
                                                  ).choices[0].message.content

        first_pids = cluster_pids(home)
        first = ask()
        deadline = time.monotonic() + 30
        while running(first_pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert running(first_pids) == [], "the idle cluster was not stopped"
        assert proc.poll() is None
        assert ask() == first  # started again on demand
        second_pids = cluster_pids(home)
        assert set(second_pids).isdisjoint(first_pids) and len(running(second_pids)) == 3
    finally:
        stop(proc)
    assert proc.returncode == 0
    assert running(second_pids) == [], "a rank outlived serve"


def test_doctor_passes_a_good_loopback_cluster(home: Path) -> None:
    done = llmdeck(home, "doctor", "--cluster", "loop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mlx 0.32" in done.stdout and "on every host" in done.stdout
    assert "the same files on every host" in done.stdout


def test_doctor_names_a_missing_model_and_a_taken_port(home: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (home / "config" / "config.toml").write_text(
            f'[[clusters]]\nname = "loop"\nhosts = ["127.0.0.1", "127.0.0.1"]\n'
            f'model = "{tmp_path / "nowhere"}"\nport = {port}\n', encoding="utf-8")
        done = llmdeck(home, "doctor", "--cluster", "loop")
    assert done.returncode == 1
    assert f"model on this machine  no folder {tmp_path / 'nowhere'}" in done.stdout, done.stdout
    assert f"in use: {port}" in done.stdout
    assert "fix: Copy the model folder" in done.stdout


def test_doctor_says_ssh_must_work_without_a_password(home: Path, model_dir: Path,
                                                      tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"hosts": [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]},
                                              {"ssh": "mac2.invalid", "ips": ["192.0.2.7"]}]}))
    (home / "config" / "config.toml").write_text(
        f'[[clusters]]\nname = "lan"\nhostfile = "{hostfile}"\nmodel = "{model_dir}"\n',
        encoding="utf-8")
    done = llmdeck(home, "doctor", "--cluster", "lan", timeout=60)
    assert done.returncode == 1
    assert "FAIL  ssh mac2.invalid" in done.stdout, done.stdout
    assert "ssh-copy-id mac2.invalid" in done.stdout


def test_unknown_cluster_is_a_sentence(home: Path) -> None:
    for args in (("cluster", "up", "nope"), ("doctor", "--cluster", "nope")):
        done = llmdeck(home, *args)
        assert done.returncode == 1
        assert "No cluster named 'nope'" in done.stderr or "no cluster named 'nope'" in done.stderr
        assert "Traceback" not in done.stderr
