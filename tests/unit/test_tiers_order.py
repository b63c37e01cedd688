"""Under xdist the files go out costliest first (recorded seconds), whole and in their own
order, so no long file starts last (xdist's order, most tests first, put a 25 s file of
one test at the very end)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers import tiers


def test_files_go_costliest_first_each_whole_in_its_own_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "recorded", lambda: {"b.py::one": 25.0, "c.py::x": 3.0})
    ids = ["a.py::t1", "a.py::t2", "a.py::t3", "b.py::one", "c.py::x", "c.py::y", "d.py::z"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    tiers.costliest_files_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["b.py::one", "c.py::x", "c.py::y", "a.py::t1",
                                         "a.py::t2", "a.py::t3", "d.py::z"]


def test_the_runner_keeps_that_order(pytestconfig: pytest.Config) -> None:
    """xdist reorders files by their number of tests unless told not to (conftest does)."""
    if getattr(pytestconfig.option, "numprocesses", None) and pytestconfig.option.dist == "loadfile":
        assert pytestconfig.option.loadscopereorder is False
