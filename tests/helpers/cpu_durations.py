"""A pytest plugin that reports the CPU seconds each test costs, not only its wall time.

On a shared 2-core box a test's wall time says more about the neighbours than about the
test; its CPU time (this process plus the children it reaped: workers, servers, CLIs)
does not. Use it to find what to make cheaper:

    .venv/bin/python -m pytest tests/integration -p tests.helpers.cpu_durations --cpu-durations=30

Module and session fixtures are charged to the first test that asks for them. Processes
that are not our children (a tmux server and the app inside it) are not counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

import pytest

_COSTS: dict[str, tuple[float, float]] = {}


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=30,
                     help="how many of the costliest tests (by CPU seconds) to list")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    cpu, wall = _cpu(), time.monotonic()
    yield
    _COSTS[item.nodeid] = (_cpu() - cpu, time.monotonic() - wall)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not _COSTS:
        return
    count = config.getoption("--cpu-durations")
    total_cpu = sum(c for c, _ in _COSTS.values())
    total_wall = sum(w for _, w in _COSTS.values())
    terminalreporter.section(f"costliest {count} tests by CPU seconds")
    for nodeid, (cpu, wall) in sorted(_COSTS.items(), key=lambda kv: -kv[1][0])[:count]:
        terminalreporter.write_line(f"{cpu:8.2f} cpu {wall:8.2f} wall  {nodeid}")
    terminalreporter.write_line(f"{total_cpu:8.2f} cpu {total_wall:8.2f} wall  "
                                f"in all ({len(_COSTS)} tests, this process)")
