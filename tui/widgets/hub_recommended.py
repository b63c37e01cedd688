"""The hub's first tab: recommended models, each with whether it fits this machine.

Rows come from core.hub's recommended list (data, so it shows offline); Enter or d on a
row posts GetRequested, and the hub screen downloads it (or finds it on disk) and loads it.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message

from core.wire.hub import Fit, Recommendation
from tui.widgets import hub_format as fmt
from tui.widgets.measured_table import MeasuredTable

# The licence and the repo are on the detail line under the table, to keep rows in 100 columns.
COLUMNS = ("Model", "Good at", "Size", "Fits here", "Where")
GOOD_AT_WIDTH = 28


def fit_text(f: Fit) -> str:
    """"yes · 3.1 GB": whether model + KV cache at the configured context fit in memory
    (the total is on the status line), and how much they take."""
    word = {"ok": "yes", "tight": "tight", "too_big": "no"}[f.verdict]
    return f"{word} · {fmt.size(f.needed_bytes)}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def where_text(on_disk: bool) -> str:
    return "on disk" if on_disk else "needs the network"


class RecommendedTable(MeasuredTable):
    """Recommended models; posts GetRequested for the row under the cursor."""

    BINDINGS = [
        Binding("enter", "get", "Get and load", show=False),
        Binding("d", "get", "Get and load"),
    ]

    class GetRequested(Message):
        def __init__(self, rec: Recommendation) -> None:
            super().__init__()
            self.rec = rec

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.recs: list[Recommendation] = []

    def on_mount(self) -> None:
        self.show([], [], set())

    def show(self, recs: list[Recommendation], fits: list[Fit], on_disk: set[str]) -> None:
        self.recs = list(recs)
        rows = [(rec.name, _clip(rec.good_at, GOOD_AT_WIDTH), fmt.size(rec.size_bytes),
                 fit_text(f), where_text(rec.local_id in on_disk))
                for rec, f in zip(self.recs, fits, strict=True)]
        # at 80 columns "Good at" and the name are cut short, so "Where" still shows
        self.fill(COLUMNS, rows, [rec.local_id for rec in self.recs],
                  squeeze={"Good at": 12, "Model": 12})

    @property
    def current(self) -> Recommendation | None:
        if not self.recs or not 0 <= self.cursor_row < len(self.recs):
            return None
        return self.recs[self.cursor_row]

    def action_get(self) -> None:
        if (rec := self.current) is not None:
            self.post_message(self.GetRequested(rec))
