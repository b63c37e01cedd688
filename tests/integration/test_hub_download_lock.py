"""Two processes pulling the same file at once: one downloads, the other waits on the
per-file lock and finds the blob done. No two ever write the same partial file."""

from __future__ import annotations

import os
import subprocess
import sys

from core import paths
from core.hub import find_model
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub

Q4 = "tiny-chat-Q4_K_M.gguf"
CHILD = """
import sys
from core.hub import pull
result = pull(sys.argv[1], sys.argv[2])
print(result.ok, result.bytes_fetched, flush=True)
"""


def test_two_processes_pulling_one_file_download_it_once(fake_hub: FakeHub) -> None:
    size = fake_hub.repos[GGUF_REPO].files[Q4].size
    fake_hub.throttle_bps = max(size, 1)  # about a second: the two pulls overlap
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, GGUF_REPO, Q4], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=os.environ.copy()) for _ in range(2)]
    outs = [kid.communicate(timeout=120) for kid in kids]
    assert [kid.returncode for kid in kids] == [0, 0], outs
    results = [out.split() for out, _ in outs]
    assert [ok for ok, _ in results] == ["True", "True"], outs
    assert sorted(int(n) for _, n in results) == [0, size]  # one fetched it all, one nothing
    assert fake_hub.served(GGUF_REPO, Q4) == size
    assert find_model(f"{GGUF_REPO}:{Q4}").valid
    assert not list(paths.hf_cache_dir().rglob("*.incomplete")) + \
        list(paths.hf_cache_dir().rglob("*.part"))
