"""A full disk: refused up front when the space is known to be short, reported as
DISK_FULL when it runs out mid-download, and never leaves a broken model behind.

Where the kernel allows unprivileged user namespaces the tests mount a real tiny tmpfs
(`unshare -rm` + `mount -t tmpfs -o size=...`) as LLMDECK_HOME for a child `llmdeck
models pull`. Where it does not (some CI kernels), a file-size limit (RLIMIT_FSIZE, with
SIGXFSZ ignored so the write fails with EFBIG) stands in for the full disk.
"""

from __future__ import annotations

import functools
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from core.hub import list_local_models
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    PYTHON,
    catalog_files_fixture,
    fake_hub_fixture,
    subprocess_env,
)
from tests.fakes.hub_server import FakeHub

Q4 = "tiny-chat-Q4_K_M.gguf"  # about 3 MB


@functools.cache
def tiny_fs_available() -> bool:
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt && df /mnt"],
        capture_output=True, timeout=10,
    ) if Path("/usr/bin/unshare").exists() else None
    return probe is not None and probe.returncode == 0


def _pull_on_tiny_fs(hub: FakeHub, home: Path, size: str, before: str = "") -> subprocess.CompletedProcess:
    """`llmdeck models pull` with LLMDECK_HOME on a fresh tmpfs of `size`."""
    home.mkdir(parents=True, exist_ok=True)
    script = (
        f'mount -t tmpfs -o size={size} tmpfs "$LLMDECK_HOME" && {before} '
        f'"{PYTHON}" -m core.hub.cli pull {GGUF_REPO} {Q4}; rc=$?; '
        'ls -la "$LLMDECK_HOME"/hf-cache/models--*/blobs/ 2>/dev/null; '
        f'"{PYTHON}" -m core.hub.cli list; exit $rc'
    )
    env = subprocess_env(hub, LLMDECK_HOME=str(home))
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)


def _limit_file_size(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _pull_with_file_limit(hub: FakeHub, home: Path, limit: int) -> subprocess.CompletedProcess:
    env = subprocess_env(hub, LLMDECK_HOME=str(home))
    return subprocess.run([PYTHON, "-m", "core.hub.cli", "pull", GGUF_REPO, Q4], env=env,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=functools.partial(_limit_file_size, limit))


def test_too_little_space_is_refused_before_downloading(fake_hub: FakeHub,
                                                        tmp_path: Path) -> None:
    if tiny_fs_available():
        done = _pull_on_tiny_fs(fake_hub, tmp_path / "tiny", "1m")
        assert done.returncode == 1, done.stderr
        assert "error [DISK_FULL]" in done.stderr and "free" in done.stderr
        assert fake_hub.served(GGUF_REPO, Q4) == 0  # refused before any byte moved
        assert Q4 not in done.stdout  # `models list` inside the tiny fs
    else:  # the write limit cannot be seen in advance: it fails mid-write instead
        done = _pull_with_file_limit(fake_hub, tmp_path / "tiny", 1024 * 1024)
        assert done.returncode == 1 and "error [DISK_FULL]" in done.stderr


def test_disk_filling_up_mid_download_is_disk_full_and_resumable(
        fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "tiny"
    if tiny_fs_available():
        # 4 MB passes the up-front check for the 3 MB file; a 2.6 MB filler written once
        # the partial file exists takes the space away while it runs (the hub is throttled).
        fake_hub.throttle_bps = 1024 * 1024
        filler = ('( until ls "$LLMDECK_HOME"/hf-cache/models--*/blobs/*.incomplete '
                  '>/dev/null 2>&1; do sleep 0.02; done; '
                  'head -c 2600000 /dev/zero > "$LLMDECK_HOME/filler" ) & ')
        done = _pull_on_tiny_fs(fake_hub, home, "4m", before=filler)
        assert done.returncode == 1, done.stderr
        assert "error [DISK_FULL]" in done.stderr and "filled up" in done.stderr
        assert ".incomplete" in done.stdout  # the partial stays for a resume
        assert Q4 not in done.stdout.split("ID", 1)[-1]  # and is not listed as a model
    else:
        done = _pull_with_file_limit(fake_hub, home, 1024 * 1024)
        assert done.returncode == 1, done.stderr
        assert "error [DISK_FULL]" in done.stderr and "resumes" in done.stderr
        monkeypatch.setenv("LLMDECK_HOME", str(home))
        assert not any(m.name == Q4 for m in list_local_models(include_bundled=False))


def test_file_size_limit_is_reported_as_disk_full(fake_hub: FakeHub, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "limited"
    done = _pull_with_file_limit(fake_hub, home, 1024 * 1024)
    assert done.returncode == 1, done.stderr
    assert "error [DISK_FULL]" in done.stderr
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    assert not any(m.name == Q4 for m in list_local_models(include_bundled=False))
    partials = list(home.glob("hf-cache/models--*/blobs/*.incomplete"))
    assert partials and partials[0].stat().st_size <= 1024 * 1024
