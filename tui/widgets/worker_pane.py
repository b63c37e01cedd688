"""The worker status pane: one row per worker process, refreshed every second.

Several models can be loaded at once: each row says what admission counts for its model
(memory), when the model last answered and when it unloads if it stays idle ("kept": it
stays; keep_alive and idle_unload_minutes decide).

Reading the pool's status is a cheap in-memory snapshot, so the refresh runs on the UI
loop via set_interval; the interval is paused while the pane is hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static

from core.wire.workers import WorkerStatus
from tui.terminal_text import table_cell, visible

REFRESH_S = 1.0


def status_table(rows: list[WorkerStatus]) -> Table | Text | Group:
    if not rows:
        return Text("No worker running: the model loads with the first message.", style="dim")
    table = Table(box=None, expand=True, pad_edge=False, collapse_padding=True, header_style="bold")
    for name, justify in (("model", "left"), ("state", "left"), ("tok/s", "right"),
                          ("active", "right"), ("queue", "right"), ("RSS", "right"),
                          ("threads", "right"), ("restarts", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    names = row_names(rows)
    for w, name in zip(rows, names, strict=True):
        table.add_row(table_cell(name), table_cell(w.state),
                      f"{w.tokens_per_s:.1f}", str(w.active), str(w.queued),
                      decimal_bytes(w.rss_bytes), str(w.threads or "-"), str(w.restarts))
    # Reasons under the table, whole: in the state column a long one squeezed every other
    # column (an MCP server's "command not found; ..." hid its name).
    errors = [Text(visible(f"{w.model}: {w.error}"), style="red") for w in rows if w.error]
    return Group(table, *loaded_lines(rows), *errors)


def row_names(rows: list[WorkerStatus]) -> list[str]:
    """Each row's model id; a model with several workers (llama.cpp replicas) gets each
    worker's number in front (`#1 gemma3:270m-q4_k_m`: the pane is narrow, and a cut cell
    keeps its start), so two rows never read alike; the pids are in the line below."""
    counts: dict[str, int] = {}
    for w in rows:
        counts[w.model] = counts.get(w.model, 0) + 1
    return [f"#{_number(w)} {w.model}" if counts[w.model] > 1 else w.model for w in rows]


def _number(w: WorkerStatus) -> str:
    return w.worker_id.rpartition("#")[2] or w.worker_id


def decimal_bytes(n: int) -> str:
    """'3.4 MB', '1.3 GB': decimal units, as the memory budget's sentences and the hub count."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def loaded_lines(rows: list[WorkerStatus]) -> list[Text]:
    """One line per loaded model (the pane is half the screen: a column each would cut
    every cell): what admission counts for it, its last use, when it unloads if idle."""
    models: dict[str, list[WorkerStatus]] = {}
    for w in rows:
        if w.last_used and w.state in ("idle", "ready", "busy", "loading"):
            models.setdefault(w.model, []).append(w)
    now = time.time()
    out = []
    for name, workers in models.items():
        memory = sum(w.memory_bytes for w in workers)
        last, unloads = idle_cells(workers[0], now)
        answering = any(w.state == "busy" for w in workers)
        parts = [decimal_bytes(memory) if memory else "", f"used {last}",
                 "answering" if answering and unloads in ("kept", "after reply")
                 else "kept loaded" if unloads == "kept" else f"unloads {unloads}"]
        if len(workers) > 1:  # replicas: which row is which process
            parts.append("pids " + ", ".join(f"#{_number(w)} {w.pid or '-'}" for w in workers))
        out.append(Text(visible(f"{name}: " + " · ".join(p for p in parts if p)), style="dim"))
    return out


def _ago(seconds: float) -> str:
    if seconds < 2:
        return "now"
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago"


def _after(seconds: float) -> str:
    if seconds < 60:
        return f"in {seconds:.0f}s"
    if seconds < 3600:
        return f"in {seconds / 60:.0f}m"
    return f"in {seconds / 3600:.1f}h"


def idle_cells(w: WorkerStatus, now: float) -> tuple[str, str]:
    """(last use, unloads): blank for processes that are not the pool's models."""
    if not w.last_used:
        return "", ""
    if w.idle_left_s is None:
        unloads = "kept"
    elif w.idle_left_s <= 0 and w.state == "busy":
        unloads = "after reply"
    else:
        unloads = _after(w.idle_left_s)
    return _ago(max(0.0, now - w.last_used)), unloads


def cluster_lines(report: str | None) -> list[Text]:
    """Each cluster not down (issue 35): host, rank, state, pid and endpoint per rank, as
    `llmdeck workers` prints them (the service reads their state files; it made the
    outside text visible already)."""
    return [Text(""), Text(report)] if report else []


class WorkerPane(Static):
    """Toggle with f4; shows model, state, tok/s, queue, memory, threads (a llama.cpp
    worker's share of the cores), last use, when it unloads and restarts per worker."""

    def __init__(self, read: Callable[[], list[WorkerStatus]],
                 engine: Callable[[], str | None] = lambda: None,
                 clusters: Callable[[], str | None] = lambda: None, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._read = read
        self._engine = engine  # the service's line when the app is its client
        self._clusters = clusters  # the service's clusters, as last mirrored
        self._timer: Timer | None = None

    def on_mount(self) -> None:
        self.border_title = "Workers (f4 hides)"
        self._timer = self.set_interval(REFRESH_S, self.refresh_status, pause=not self.display)
        self.refresh_status()

    def refresh_status(self) -> None:
        try:
            rows = self._read()
        except Exception as exc:  # the pool is shutting down
            self.update(Text(f"Worker status unavailable: {exc}", style="dim"))
            return
        engine = self._engine()
        head = [Text(engine, style="dim"), Text("")] if engine else []
        self.update(Group(*head, status_table(rows), *cluster_lines(self._clusters())))

    def toggle(self) -> bool:
        """Show or hide the pane; the timer runs only while it is shown."""
        self.display = not self.display
        if self._timer is not None:
            if self.display:
                self.refresh_status()
                self._timer.resume()
            else:
                self._timer.pause()
        return bool(self.display)
