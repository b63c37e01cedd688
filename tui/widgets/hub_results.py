"""The hub's search results: one row per repo, Enter opens its files."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from core.wire.hub import SearchResult
from tui.widgets import hub_format as fmt
from tui.widgets.measured_table import MeasuredTable

# The format shows in the engine ("llamacpp" serves GGUF, "mlx" MLX) and the detail line.
COLUMNS = ("Repo", "Runs here", "Quant", "Size", "Arch", "Dl", "Likes", "Updated",
           "License", "Gated")
REPO_WIDTH = 30
QUANT_WIDTH = 12
LICENSE_WIDTH = 10
# What a narrow terminal drops first, then how short the repo may get (the detail line
# under the table names it whole).
OPTIONAL = ("Updated", "License", "Likes", "Arch")
SQUEEZE = {"Repo": 20}


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ResultsTable(MeasuredTable):
    """Search results; posts Opened for the repo under the cursor."""

    BINDINGS = [Binding("enter", "select_cursor", "Files")]

    class Opened(Message):
        def __init__(self, result: SearchResult) -> None:
            super().__init__()
            self.result = result

    class Highlighted(Message):
        def __init__(self, result: SearchResult) -> None:
            super().__init__()
            self.result = result

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.results: list[SearchResult] = []

    def on_mount(self) -> None:
        self.show([])

    def show(self, results: list[SearchResult]) -> None:
        self.results = list(results)
        rows = [(_clip(r.repo_id, REPO_WIDTH), fmt.verdict(r.runnable),
                 _clip(r.quant or "", QUANT_WIDTH), fmt.size(r.size_bytes),
                 r.architecture or "", fmt.count(r.downloads), fmt.count(r.likes),
                 fmt.when(r.last_modified), _clip(r.license or "", LICENSE_WIDTH),
                 "gated" if r.gated else "") for r in self.results]
        self.fill(COLUMNS, rows, [r.repo_id for r in self.results],
                  optional=OPTIONAL, squeeze=SQUEEZE)

    @property
    def current(self) -> SearchResult | None:
        if not self.results or self.cursor_row < 0 or self.cursor_row >= len(self.results):
            return None
        return self.results[self.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if (r := self.current) is not None:
            self.post_message(self.Opened(r))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if (r := self.current) is not None:
            self.post_message(self.Highlighted(r))
