"""Compiled bytecode for the suite's processes when the shell says not to write any.

With PYTHONDONTWRITEBYTECODE=1 (set on some boxes and CI images) no `.pyc` is written, so
every process the suite starts compiles what it imports from source again: each pytest-xdist
worker rewrites and compiles ~300 test modules while collecting (~8 of its ~20 CPU-s), and
every service, worker, app and `serve` the tests start compiles llmdeck's modules. The
variable is there to keep `__pycache__` folders out of the tree, so the suite keeps them out
too: its processes write bytecode under one folder in the temp directory
(PYTHONPYCACHEPREFIX, which mirrors each source's absolute path, so trees never share a
file; Python and pytest check each cached file against its source before using it). An
explicit PYTHONPYCACHEPREFIX is kept.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def cache_bytecode_outside_the_tree() -> None:
    """Called when tests/conftest.py is imported: before pytest imports a test module and
    before xdist starts its workers (they inherit this environment)."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(
        Path(tempfile.gettempdir()) / f"llmdeck-test-pycache-{os.getuid()}")
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
