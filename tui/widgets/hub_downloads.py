"""The download queue as progress rows: bytes, rate, ETA, and the error when one fails.

Rows render from DownloadProgress values only, so the same widget shows a live job and a
fixed snapshot state; the queue itself lives on the hub screen. A download that gets no
data says so ("stalled: no data for 12 s · c cancels") long before its timeout ends it,
and one kept without a hash from the Hub says it is unverified.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, ProgressBar, Static

from core.hub import DownloadProgress
from tui.terminal_text import visible
from tui.widgets import hub_format as fmt

EMPTY_HINT = "No downloads running: pick a file and press d."


class DownloadRow(Vertical):
    """One job: name, bar, numbers; an error line underneath when it failed."""

    def __init__(self, title: str, progress: DownloadProgress) -> None:
        super().__init__(classes="download-row")
        self.title = title
        self.progress = progress

    def compose(self) -> ComposeResult:
        with Horizontal(classes="download-line"):
            yield Label("", classes="download-name", markup=False)  # a repo's file name
            yield ProgressBar(total=1, show_eta=False, classes="download-bar")
            yield Label("", classes="download-stats", markup=False)  # holds file names
        yield Label("", classes="download-error", markup=False)  # the Hub's words

    def on_mount(self) -> None:
        self.show(self.progress)

    def show(self, p: DownloadProgress) -> None:
        self.progress = p
        self.query_one(".download-name", Label).update(visible(self.title))
        self.query_one(ProgressBar).update(total=max(p.total, 1),
                                           progress=p.downloaded if p.total else 1)
        self.query_one(".download-stats", Label).update(visible(stats_line(p)))
        error = self.query_one(".download-error", Label)
        if p.error is not None and p.state == "error":
            error.update(visible(f"{p.error.code}: {p.error.message}"))
            error.display = True
        else:
            error.display = False
        for state in fmt.STATE_LABELS:
            self.set_class(p.state == state, f"-{state}")
        self.set_class(p.stalled_s is not None and not p.finished, "-stalled")


def stats_line(p: DownloadProgress) -> str:
    """The numbers of one row, with a stall or an unverified file named."""
    line = fmt.progress_stats(p)
    if p.stalled_s is not None and not p.finished:
        line += f" · stalled: no data for {p.stalled_s:.0f} s · c cancels"
    if p.state == "done" and p.unverified:
        line += f" · unverified: the Hub gave no hash for {', '.join(p.unverified)}"
    return line


class DownloadsPanel(VerticalScroll):
    """Every job of this session, newest last; hidden until the first download."""

    can_focus = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: dict[Hashable, DownloadRow] = {}
        self.border_title = "Downloads"

    def compose(self) -> ComposeResult:
        yield Static(EMPTY_HINT, classes="downloads-empty")

    def show_progress(self, key: Hashable, progress: DownloadProgress, title: str = "") -> None:
        """Add or update the row for `key` (a job) with its latest progress."""
        row = self.rows.get(key)
        if row is None:
            row = DownloadRow(title or progress.repo_id, progress)
            self.rows[key] = row
            self.query(".downloads-empty").remove()
            self.mount(row)
            self.scroll_end(animate=False)
        else:
            row.show(progress)

    def clear_finished(self) -> int:
        """Drop rows of jobs that ended (done, failed, cancelled); return how many."""
        gone = [k for k, row in self.rows.items() if row.progress.finished]
        for k in gone:
            self.rows.pop(k).remove()
        if gone and not self.rows:
            self.mount(Static(EMPTY_HINT, classes="downloads-empty"))
        return len(gone)

    @property
    def has_finished(self) -> bool:
        return any(row.progress.finished for row in self.rows.values())
