"""The worker status pane: one row per worker process, refreshed every second.

Reading the pool's status is a cheap in-memory snapshot, so the refresh runs on the UI
loop via set_interval; the interval is paused while the pane is hidden.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static

from core.workers import WorkerStatus
from tui.terminal_text import table_cell, visible

REFRESH_S = 1.0


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit in ("B", "KB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def status_table(rows: list[WorkerStatus]) -> Table | Text | Group:
    if not rows:
        return Text("No worker running: the model loads with the first message.", style="dim")
    table = Table(box=None, expand=True, pad_edge=False, header_style="bold")
    for name, justify in (("model", "left"), ("state", "left"), ("tok/s", "right"),
                          ("active", "right"), ("queue", "right"), ("RSS", "right"),
                          ("restarts", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for w in rows:
        table.add_row(table_cell(w.model), table_cell(w.state), f"{w.tokens_per_s:.1f}", str(w.active), str(w.queued),
                      human_bytes(w.rss_bytes), str(w.restarts))
    # Reasons under the table, whole: in the state column a long one squeezed every other
    # column (an MCP server's "command not found; ..." hid its name).
    errors = [Text(visible(f"{w.model}: {w.error}"), style="red") for w in rows if w.error]
    return Group(table, *errors) if errors else table


class WorkerPane(Static):
    """Toggle with f4; shows model, state, tok/s, queue, RSS and restarts per worker."""

    def __init__(self, read: Callable[[], list[WorkerStatus]], **kwargs) -> None:
        super().__init__("", **kwargs)
        self._read = read
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
        self.update(status_table(rows))

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
