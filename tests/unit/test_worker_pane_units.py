"""F4 and `llmdeck service status` say every size in one kind of unit: decimal MB and GB,
as the hub, `models list` and doctor's budget do. The RSS column divided by 1024 and still
said "MB" (436.1 MB beside a loaded line's 404.1 MB counted by 1000), and the service's
lines said MiB."""

from __future__ import annotations

from rich.console import Console

from core.service.control import format_status, status_line
from core.wire.workers import WorkerStatus
from core.workers.status_file import format_table
from tui.widgets.worker_pane import status_table


def _shown(renderable: object) -> str:
    console = Console(width=120, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_rss_column_and_the_service_line_count_by_1000() -> None:
    row = WorkerStatus("chat#0", "gemma3:270m-q4_k_m", "llamacpp", "idle", 4250,
                       500 * 2**20, 0, 0, 0.0, 0, memory_bytes=200_000_000)
    table = _shown(status_table([row]))
    assert "524.3 MB" in table and "500.0 MB" not in table, table
    line = status_line({"pid": 7, "uptime_s": 5, "rss_bytes": 66 * 2**20,
                        "workers_rss_bytes": 861 * 2**20})
    assert "972.0 MB with its workers" in line and "MiB" not in line, line


def test_service_status_counts_by_1000() -> None:
    shown = format_status({"pid": 7, "uptime_s": 5, "rss_bytes": 66 * 2**20,
                           "workers_rss_bytes": 861 * 2**20, "models": ["m:1b"]})
    assert "memory   972.0 MB  (service 69.2 MB, workers 902.8 MB)" in shown, shown


def test_llmdeck_workers_counts_rss_as_memory_beside_it() -> None:
    row = WorkerStatus("chat#0", "m:1b", "llamacpp", "idle", 4250, 500 * 2**20, 0, 0, 0.0, 0,
                       memory_bytes=200_000_000)
    cells = format_table([row]).splitlines()[1].split()
    assert "524MB" in cells and "200MB" in cells, cells  # RSS said "500M", counted by 1024
