"""The hub screen's cell text: ETAs, rates, counts and progress lines people read."""

from __future__ import annotations

from core.hub import DownloadProgress, HubError
from core.hub.runnable import Runnable
from tui.widgets import hub_format as fmt


def progress(state: str, done: int = 0, total: int = 3_100_000, rate: float = 0.0,
             eta: float | None = None, index: int = 0, count: int = 1,
             filename: str = "m.gguf") -> DownloadProgress:
    return DownloadProgress("acme/M", filename, index, count, done, total, rate, eta,
                            state)  # type: ignore[arg-type]


def test_eta_reads_as_a_clock() -> None:
    assert fmt.eta(None) == "--:--"
    assert fmt.eta(2.4) == "0:02"
    assert fmt.eta(754) == "12:34"
    assert fmt.eta(3 * 3600 + 5) == "3:00:05"


def test_rate_and_counts() -> None:
    assert fmt.rate(0) == "--"
    assert fmt.rate(850_000) == "850.0 kB/s"
    assert [fmt.count(n) for n in (12, 5000, 2_500_000)] == ["12", "5.0k", "2.5M"]
    assert fmt.size(None) == "?" and fmt.size(1_300_000) == "1.3 MB"


def test_progress_line_for_each_state() -> None:
    running = progress("downloading", 1_300_000, rate=850_000, eta=2.1, index=1, count=2,
                       filename="mmproj.gguf")
    assert fmt.progress_stats(running) == (
        "1.3 MB / 3.1 MB · 850.0 kB/s · ETA 0:02 · file 2/2: mmproj.gguf")
    assert fmt.progress_stats(progress("queued")) == "0 B / 3.1 MB · waiting"
    assert fmt.progress_stats(progress("done", 3_100_000)) == "3.1 MB · done"
    failed = DownloadProgress("acme/M", "", 0, 1, 0, 10, 0.0, None, "error",
                              error=HubError("OFFLINE", "x"))
    assert fmt.progress_stats(failed).endswith("failed")


def test_verdicts_name_the_engine_or_the_obstacle() -> None:
    assert fmt.verdict(Runnable(True, "llamacpp", 1, 2, "fits")) == "✓ llamacpp"
    assert fmt.verdict(Runnable(False, None, 1, 2, "no engine")) == "✗ no engine"
    assert fmt.verdict(Runnable(False, "mlx", 9, 2, "needs more")) == "✗ too big"


def test_job_titles() -> None:
    assert fmt.job_title("acme/M-GGUF", "m-Q4_K_M.gguf") == "acme/M-GGUF · m-Q4_K_M.gguf"
    assert fmt.job_title("mlx-community/M-4bit", "") == "mlx-community/M-4bit (MLX)"
