"""A DataTable whose column widths are measured when it is filled.

DataTable's auto width is worked out on the table's next Idle. A table filled while its
tab is hidden, or just before a screenshot, may be drawn before it gets one, with rows
cut to the old widths ("acme/gemma-3-270m-it-GGU", "hf-cach" in a hub test on CI).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from textual.widgets import DataTable

from tui.terminal_text import table_cell, visible


class MeasuredTable(DataTable):
    """Rows of plain strings; each fill sets every column to its widest cell or label."""

    def fill(self, columns: Sequence[str], rows: Sequence[Sequence[str]],
             keys: Sequence[str]) -> None:
        self.clear(columns=True)
        for i, label in enumerate(columns):
            width = max([cell_len(label), *(cell_len(visible(row[i])) for row in rows)])
            self.add_column(label, width=width, key=label)
        for row, key in zip(rows, keys, strict=True):
            self.add_row(*(table_cell(cell) for cell in row), key=key)
