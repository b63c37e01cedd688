"""The fast tier, measured rather than guessed: a test that took SLOW_S or more in the last
recorded full run is marked `slow`, so `pytest -m "not slow"` is the few-minute loop a
developer runs while working, and the README's command still runs everything.

The figures live in tests/durations.json (test id -> seconds: set-up, call and tear-down
together, from one `-n 3` run on a 2-core box; only the slow ones are kept, so the file
stays small). A test not in the file counts as fast: a new
test is expected to be cheap, and the next recording puts it where it belongs. Record
again after a change that moves the figures:

    .venv/bin/python -m pytest -n 3 --record-durations

A module's shared fixture (a model loaded once per file) is charged to the test that asked
for it first, which is then slow; the file's other tests stay fast only if they do not
need the fixture, so a file usually falls wholly on one side.

The same figures order the files under pytest-xdist (`-n N`, a file per process at a time):
the costliest file first, so no long file starts last while the other processes sit idle
(xdist's own order, most tests first, put a 25 s file of one test at the very end).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
SLOW_S = 1.5
UNRECORDED_S = 0.2  # a test not in the file (under SLOW_S): the suite's fast ones average this

_SPENT: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help=f"write each test's seconds to {DURATIONS.name} at the end "
                          "(the fast tier's source)")


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def mark_slow(items: list[pytest.Item]) -> int:
    """Mark the recorded slow tests `slow` (those a module marks already stay so); returns
    how many this added."""
    seconds = recorded()
    added = 0
    for item in items:
        if seconds.get(item.nodeid, 0.0) >= SLOW_S and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
            added += 1
    return added


def costliest_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: whole files, the costliest (recorded seconds) first; a
    file's own tests keep their order. Ties keep the path order, so every xdist worker
    collects the same list."""
    seconds = recorded()
    cost: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        cost[path] = cost.get(path, 0.0) + seconds.get(item.nodeid, UNRECORDED_S)
    items.sort(key=lambda item: -cost[item.nodeid.split("::", 1)[0]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_slow(items)  # before `-m "not slow"` deselects (this plugin's hook runs first)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the controller under xdist too: every worker's reports reach it.
    _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not session.config.getoption("--record-durations") or hasattr(session.config,
                                                                     "workerinput"):
        return
    slow = {k: round(v, 1) for k, v in sorted(_SPENT.items()) if v >= SLOW_S}
    DURATIONS.write_text(json.dumps(slow, indent=0) + "\n", encoding="utf-8")
