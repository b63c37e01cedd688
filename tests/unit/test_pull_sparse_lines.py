"""`llmdeck pull` into a pipe: a fast pull whose last update before verifying was short
of 100% still says 100% while downloading, before "verifying" (it said 100% only on the
verifying line), and a steady stream of updates makes at most a line a tenth."""

from __future__ import annotations

from core.service.pull_cli import SparseLines

MB = 2**20


def _job(state: str, done: int, total: int = 10 * MB, fetched: int | None = None) -> dict:
    return {"state": state, "downloaded": done, "total": total, "filename": "m.gguf",
            "rate_bps": 1.0, "fetched": fetched}


def _said(updates: list[dict]) -> list[tuple[str, str]]:
    sparse = SparseLines()
    lines = [line for job in updates for line in sparse.lines(job)]
    return [(line.split("] ", 1)[1].split()[0], line.split()[-2]) for line in lines]


def test_a_fast_pull_says_100_percent_before_verifying() -> None:
    said = _said([_job("queued", 0, 0), _job("planning", 0, 0), _job("queued", 0),
                  _job("downloading", 0), _job("downloading", 95 * MB // 10),
                  _job("verifying", 10 * MB), _job("downloading", 10 * MB),
                  _job("done", 10 * MB, fetched=10 * MB)])
    assert said == [("0.0%", "queued"), ("0.0%", "planning"), ("0.0%", "downloading"),
                    ("95.0%", "downloading"), ("100.0%", "downloading"),
                    ("100.0%", "verifying"), ("100.0%", "done")]


def test_many_updates_make_a_line_a_tenth() -> None:
    updates = [_job("downloading", n * MB // 10) for n in range(101)]
    said = _said(updates + [_job("verifying", 10 * MB), _job("done", 10 * MB, fetched=1)])
    assert [p for p, s in said if s == "downloading"] == [f"{n * 10}.0%" for n in range(11)]
    assert [s for _, s in said][-2:] == ["verifying", "done"]


def test_a_file_already_here_is_not_said_downloaded() -> None:
    assert _said([_job("planning", 0, 0), _job("done", 10 * MB, fetched=0)]) == [
        ("0.0%", "planning"), ("100.0%", "done")]


def test_a_pull_that_fails_before_any_byte_draws_no_bar() -> None:
    """Offline or no such repo: the error line says it; no "0 B/0 B ... error" bar first."""
    assert _said([_job("queued", 0, 0), _job("error", 0, 0)]) == [("0.0%", "queued")]
    assert _said([_job("downloading", 0), _job("error", 0)])[-1] == ("0.0%", "error")
