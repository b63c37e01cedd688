"""Text for the hub screen's cells: sizes, rates, ETAs and verdicts, in one place.

The tables, the download rows and the snapshot tests all read the same strings, so a
size never shows as "3.1 MB" in one spot and "3 MiB" in another.
"""

from __future__ import annotations

from datetime import datetime

from core.wire.hub import DownloadProgress, Runnable, SearchResult, human_bytes

__all__ = ["eta", "human_bytes", "job_title", "progress_stats", "rate", "size", "verdict",
           "when"]


def job_title(repo_id: str, primary: str) -> str:
    """What a download row is called: the GGUF file picked, or the MLX repo as a whole."""
    return f"{repo_id} · {primary}" if primary else f"{repo_id} (MLX)"


def size(n: int | None) -> str:
    return human_bytes(n) if n else "?"


def rate(bps: float) -> str:
    return f"{human_bytes(bps)}/s" if bps > 0 else "--"


def eta(seconds: float | None) -> str:
    """m:ss or h:mm:ss; unknown while the rate is not measured yet."""
    if seconds is None:
        return "--:--"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def when(stamp: datetime | None) -> str:
    return stamp.strftime("%Y-%m-%d") if stamp else ""


def count(n: int) -> str:
    """5000 -> 5.0k: downloads and likes in a narrow column."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def verdict(runnable: Runnable) -> str:
    """Short cell text; the reason goes in the detail line under the table."""
    if runnable.ok:
        return f"✓ {runnable.engine}"
    if runnable.engine is None:
        return "✗ no engine"
    return "✗ too big" if runnable.needed_bytes else "✗ unsupported"  # an architecture


def result_detail(r: SearchResult) -> str:
    """One line about the highlighted repo: what the table had to abbreviate."""
    parts = [r.repo_id, f"{r.format.upper()} {r.quant or ''}".strip(), f"role {r.role}"]
    if r.gated:
        parts.append("gated: accept its terms on the Hub first")
    run = r.runnable
    if run.ok and run.needed_bytes:  # the need, not the free memory: that changes by the second
        parts.append(f"runs here with {run.engine}, needs about {human_bytes(run.needed_bytes)}")
    elif run.ok:
        parts.append(f"runs here with {run.engine}; {run.reason}")
    else:
        parts.append(f"cannot run here: {run.reason}")
    return " · ".join(parts)


STATE_LABELS = {"queued": "waiting", "downloading": "downloading", "verifying": "verifying",
                "done": "done", "error": "failed", "cancelled": "cancelled"}


def progress_stats(p: DownloadProgress) -> str:
    """'1.3 MB / 3.1 MB · 850 kB/s · ETA 0:03 · file 1/2' for one download."""
    amount = f"{human_bytes(p.downloaded)} / {human_bytes(p.total)}"
    if p.state in ("downloading", "verifying"):
        parts = [amount, rate(p.rate_bps), f"ETA {eta(p.eta_s)}"]
        if p.file_count > 1:
            parts.append(f"file {p.file_index + 1}/{p.file_count}: {p.filename}")
        if p.state == "verifying":
            parts.append("verifying")
        return " · ".join(parts)
    if p.state == "done":
        return f"{human_bytes(p.total)} · done"
    return f"{amount} · {STATE_LABELS[p.state]}"
