"""`llmdeck models ...` end to end: a real child process, the real client, the fake Hub."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GATED_REPO,
    GGUF_REPO,
    PYTHON,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
    make_gguf,
    subprocess_env,
)
from tests.fakes.hub_server import FakeHub


def models(hub: FakeHub, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "core.hub.cli", *args], env=subprocess_env(hub, **env),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_search_pull_list_rm(fake_hub: FakeHub, llmdeck_home: Path) -> None:
    found = models(fake_hub, "search", "tiny", "--gguf", "--sort", "likes")
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].split()[:3] == ["REPO", "FORMAT", "QUANT"]
    assert lines[1].startswith(VISION_REPO)  # most liked first

    files = models(fake_hub, "files", VISION_REPO)
    assert files.returncode == 0
    assert "mmproj-tiny-vl-f16.gguf" in files.stdout and "projector" in files.stdout

    pulled = models(fake_hub, "pull", VISION_REPO)
    assert pulled.returncode == 0, pulled.stderr
    path = Path(pulled.stdout.strip())
    assert path.name == "tiny-vl-Q4_K_M.gguf" and path.exists()
    assert "100.0%" in pulled.stderr  # the progress bar reached the end
    assert "downloaded" in pulled.stderr
    assert "its id: tiny-vl:q4_k_m " in pulled.stderr  # the name to use it by

    listed = models(fake_hub, "list")  # by the one id the app and the API show (issue 45)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("tiny-vl:q4_k_m"))
    assert "vision" in row and row.rstrip().endswith("ok") and "hf-cache" in row

    refused = models(fake_hub, "rm", f"{VISION_REPO}:tiny-vl-Q4_K_M.gguf")
    assert refused.returncode == 2 and "CONFIRM_REQUIRED" in refused.stderr
    assert path.exists()
    removed = models(fake_hub, "rm", "tiny-vl:q4_k_m", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert "freed" in removed.stderr
    assert not path.exists()
    assert "tiny-vl" not in models(fake_hub, "list").stdout


def test_errors_exit_non_zero_with_the_code_and_a_sentence(fake_hub: FakeHub) -> None:
    gated = models(fake_hub, "pull", GATED_REPO)
    assert gated.returncode == 1
    assert "error [GATED]" in gated.stderr and GATED_REPO in gated.stderr
    missing = models(fake_hub, "pull", "nobody/nothing")
    assert missing.returncode == 1 and "error [NOT_FOUND]" in missing.stderr
    choose = models(fake_hub, "pull", GGUF_REPO)
    assert choose.returncode == 2 and "tiny-chat-Q8_0.gguf" in choose.stderr
    offline = models(fake_hub, "search", "x", HF_ENDPOINT="http://127.0.0.1:9")
    assert offline.returncode == 1 and "error [OFFLINE]" in offline.stderr
    unknown = models(fake_hub, "rm", "no-such-model", "--yes")
    assert unknown.returncode == 2 and "models list" in unknown.stderr
    usage = models(fake_hub, "frobnicate")
    assert usage.returncode == 2


def test_list_shows_models_folder_and_invalid_files(fake_hub: FakeHub, llmdeck_home: Path) -> None:
    folder = llmdeck_home / "data" / "models"
    make_gguf(folder / "mine-Q8_0.gguf", 4096)
    (folder / "broken-Q4_0.gguf").write_bytes(b"not a gguf at all, just bytes")
    listed = models(fake_hub, "list")
    assert listed.returncode == 0
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert rows["mine:q8_0"].rstrip().endswith("ok")
    assert "invalid: not a GGUF file" in rows["broken:q4_0"]
    assert "gemma3:270m-q4_k_m" in rows  # the bundled model, by the id the API lists
