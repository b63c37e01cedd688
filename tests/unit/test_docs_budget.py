"""core.docs.budget: the memory and time net under the documents worker's reading.

Each case runs in a child Python (the bounds limit and, past the grace, end the process
they run in), and is checked from outside: its exit code, what it printed, its time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from core.docs.budget import EXIT_OVER_TIME, GRACE_S, memory_error_in

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="RLIMIT_DATA is kept by Linux only")


def run_child(body: str, timeout: float = 30) -> tuple[int, str, float]:
    code = "from core.docs.budget import ReadBounds, bounded, OverTime\n" + textwrap.dedent(body)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - t0


def test_an_allocation_past_the_budget_fails_and_the_limit_is_lifted_after() -> None:
    rc, out, _ = run_child("""
        try:
            with bounded(ReadBounds(memory_bytes=64 << 20, seconds=30)):
                big = bytearray(512 << 20)
            print("allocated")
        except MemoryError:
            print("refused")
        again = bytearray(512 << 20)  # the embedder after the read needs what it needs
        print("lifted", len(again) >> 20)
    """)
    assert rc == 0, out
    assert "refused" in out and "lifted 512" in out, out


def test_python_code_past_its_time_gets_over_time_and_a_pulse_meanwhile() -> None:
    rc, out, seconds = run_child("""
        import time
        seen = []
        try:
            with bounded(ReadBounds(seconds=1.5), lambda *a: seen.append(a)):
                while True:
                    try:
                        time.sleep(0.01)
                    except Exception:  # a converter's catch-all must not swallow it
                        pass
        except OverTime:
            print("over time", seen)
    """)
    assert rc == 0, out
    assert "over time [('converting', 1, 1)]" in out, out
    assert seconds < 10


def test_a_read_stuck_in_c_code_ends_the_process_after_the_grace() -> None:
    """SQLite's step runs without Python's lock and ignores SIGALRM: only the watchdog
    thread can stop it, by ending the process with EXIT_OVER_TIME."""
    rc, out, seconds = run_child("""
        import sqlite3
        with bounded(ReadBounds(seconds=1)):
            sqlite3.connect(":memory:").execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                "SELECT count(*) FROM c").fetchone()
        print("finished?")
    """)
    assert rc == EXIT_OVER_TIME, (rc, out)
    assert "finished?" not in out
    assert seconds < 1 + GRACE_S + 5


def test_memory_errors_are_found_inside_markitdown_s_wrapper() -> None:
    class Attempt:
        def __init__(self, exc: BaseException) -> None:
            self.exc_info = (type(exc), exc, None)

    class Wrapped(Exception):
        def __init__(self, attempts: list[Attempt]) -> None:
            self.attempts = attempts

    assert memory_error_in(Wrapped([Attempt(ValueError()), Attempt(MemoryError())]))
    assert not memory_error_in(Wrapped([Attempt(ValueError())]))
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert memory_error_in(outer)
