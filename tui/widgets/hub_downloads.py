"""The download queue as progress rows: bytes, rate, ETA, and the error when one fails.

Rows render from DownloadProgress values only, so the same widget shows a live job and a
fixed snapshot state; the queue itself lives on the hub screen. A download that gets no
data says so ("stalled: no data for 12 s · Esc or c cancels") long before its timeout ends it,
and one kept without a hash from the Hub says it is unverified.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, ProgressBar, Static

from core.wire.hub import DownloadProgress
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
        # the Hub's words when it failed; else a stall or an unverified file, said here
        # in full where the stats column would cut it
        yield Label("", classes="download-error", markup=False)

    def on_mount(self) -> None:
        self.show(self.progress)

    def show(self, p: DownloadProgress) -> None:
        self.progress = p
        self.query_one(".download-name", Label).update(visible(self.title))
        self.query_one(ProgressBar).update(total=max(p.total, 1),
                                           progress=p.downloaded if p.total else 1)
        self.query_one(".download-stats", Label).update(visible(fmt.progress_stats(p)))
        note = self.query_one(".download-error", Label)
        text = note_line(p)
        note.update(visible(text or ""))
        note.display = text is not None
        for state in fmt.STATE_LABELS:
            self.set_class(p.state == state, f"-{state}")
        self.set_class(p.stalled_s is not None and not p.finished, "-stalled")


def note_line(p: DownloadProgress) -> str | None:
    """The line under a row: the error, a stall, or the files kept unverified."""
    if p.error is not None and p.state == "error":
        return f"{p.error.code}: {p.error.message}"
    if p.stalled_s is not None and not p.finished:
        return (f"stalled: no data for {p.stalled_s:.0f} s · Esc or c cancels (the partial "
                "file is kept)")
    if p.state == "done" and p.unverified:
        return (f"unverified: the Hub gave no hash for {', '.join(p.unverified)}, so its "
                "bytes are unchecked")
    return None


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
