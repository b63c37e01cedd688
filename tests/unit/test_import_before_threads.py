"""Modules that worker threads import lazily are imported by the runtime first.

Two threads importing a package and one of its submodules at the same moment can each
hold one of Python's per-module import locks and wait for the other's: Python then raises
"deadlock detected by _ModuleLock(...)". The service's threads read core.model_files (the
memory budget, the hub's listings, the engine choice), and a model once failed to load
with that error, so the runtime imports it on the loop's thread before any thread starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_runtime_has_core_model_files_loaded_before_its_threads() -> None:
    code = "import sys; from core.runtime import Runtime; print('core.model_files' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "True"
