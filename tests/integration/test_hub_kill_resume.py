"""A pull killed with SIGKILL mid-download resumes without fetching its bytes again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from core import paths
from core.hub import cache_layout as layout
from core.hub import list_local_models, pull
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    PYTHON,
    catalog_files_fixture,
    fake_hub_fixture,
    subprocess_env,
)
from tests.fakes.hub_server import _SERVE_SLICE, FakeHub

Q4 = "tiny-chat-Q4_K_M.gguf"


def _wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_kill_9_mid_download_then_resume(fake_hub: FakeHub) -> None:
    file = fake_hub.repos[GGUF_REPO].files[Q4]
    partial = layout.partial_path(paths.hf_cache_dir(), GGUF_REPO, file.sha256)
    fake_hub.throttle_bps = 1024 * 1024
    child = subprocess.Popen(
        [PYTHON, "-m", "core.hub.cli", "pull", GGUF_REPO, Q4],
        env=subprocess_env(fake_hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        _wait_for(lambda: partial.exists() and partial.stat().st_size >= 1024 * 1024)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    served_first = fake_hub.served(GGUF_REPO, Q4)
    kept = partial.stat().st_size
    assert 0 < kept < file.size
    assert not any(m.name == Q4 for m in list_local_models(include_bundled=False))

    fake_hub.throttle_bps = None
    result = pull(GGUF_REPO, Q4)
    assert result.ok, result.error
    assert result.bytes_fetched == file.size - kept
    total_served = fake_hub.served(GGUF_REPO, Q4)
    # every byte crossed the wire once, except what was in flight when the kill landed
    assert total_served <= file.size + _SERVE_SLICE
    assert served_first - kept <= _SERVE_SLICE
    assert Path(result.path or "").stat().st_size == file.size
    [model] = [m for m in list_local_models(include_bundled=False) if m.name == Q4]
    assert model.valid
