"""config.toml through its real doors (issue 44 item 5): `api_key = "..."` is the key
`llmdeck serve` requires (LLMDECK_API_KEY and --api-key above it), and a key llmdeck does
not read is named where the person looks: serve's stderr, `llmdeck doctor`, and `cluster
up` for a [[clusters]] entry left out because of it (`env`, `ssh_options`)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.serve import ROOT, scripted_args, spawn_serve

CLUSTER = ('[[clusters]]\nname = "lab"\nmodel = "/models/m"\nhosts = ["10.0.0.1", "10.0.0.2"]\n'
           'env = {MLX_METAL_FAST_SYNCH = "1"}\n')


def _config(home: Path, text: str) -> None:
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text(text, encoding="utf-8")


def _status(url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url + "/models", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize(("env_key", "flag_key", "works", "refused"), [
    (None, None, "from-config", None),
    ("from-env", None, "from-env", "from-config"),
    ("from-env", "from-flag", "from-flag", "from-env"),
])
def test_the_config_key_is_the_servers_key_below_env_and_flag(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch, env_key: str | None,
        flag_key: str | None, works: str, refused: str | None) -> None:
    _config(llmdeck_home, 'api_key = "from-config"\n')
    if env_key:
        monkeypatch.setenv("LLMDECK_API_KEY", env_key)
    else:
        monkeypatch.delenv("LLMDECK_API_KEY", raising=False)
    proc, url = spawn_serve(llmdeck_home, *scripted_args(),
                            *(["--api-key", flag_key] if flag_key else []))
    try:
        assert _status(url, None) == 401, "every route answered without a key"
        assert _status(url, works) == 200
        if refused:
            assert _status(url, refused) == 401
    finally:
        proc.terminate()
        proc.wait(30)


def test_unknown_keys_are_named_by_serve_doctor_and_cluster_up(llmdeck_home: Path) -> None:
    _config(llmdeck_home, "contxt_size = 8192\n" + CLUSTER)
    env = {**os.environ, "LLMDECK_HOME": str(llmdeck_home), "PYTHONPATH": str(ROOT)}

    def llmdeck(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True,
                              text=True, timeout=120, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)

    up = llmdeck("cluster", "up", "lab")
    assert up.returncode == 1
    assert "entry 'lab' in config.toml was not read: unknown key 'env'" in up.stderr, up.stderr
    doctor = llmdeck("doctor")
    told = doctor.stdout + doctor.stderr
    assert "unknown setting 'contxt_size'" in told and "unknown key 'env'" in told, told
    proc, _ = spawn_serve(llmdeck_home, *scripted_args())
    try:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "settings: unknown setting 'contxt_size' ignored" in err
    assert "cluster 'lab' in [[clusters]] ignored: unknown key 'env'" in err, err


def test_a_key_of_the_wrong_type_is_named_and_no_key_is_taken(llmdeck_home: Path) -> None:
    from core.config import Settings

    _config(llmdeck_home, "api_key = 1234\n")
    settings = Settings.load()
    assert settings.api_key is None
    assert any(p.startswith("api_key = 1234 ignored") for p in settings.problems), settings.problems


def test_the_config_key_holds_when_serve_opens_in_the_service(llmdeck_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain `llmdeck serve` (the listener inside the engine service) takes it too."""
    import re

    from tests.helpers import service_proc as svc

    monkeypatch.delenv("LLMDECK_API_KEY", raising=False)
    _config(llmdeck_home, 'api_key = "from-config"\n')
    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args())
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "--port", "0"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            match = re.search(r"listening on (\S+) \(in the llmdeck service", line)
            assert match, line
            url = match.group(1)
            assert _status(url, None) == 401
            assert _status(url, "from-config") == 200
        finally:
            proc.terminate()
            proc.wait(30)
