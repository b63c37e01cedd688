"""A DataTable whose column widths are measured when it is filled, and fitted to its width.

DataTable's auto width is worked out on the table's next Idle. A table filled while its
tab is hidden, or just before a screenshot, may be drawn before it gets one, with rows
cut to the old widths ("acme/gemma-3-270m-it-GGU", "hf-cach" in a hub test on CI).

A table wider than its widget hid its last columns behind a scrollbar (the hub's "Where"
and "Valid" at 80 columns): so a fill names the columns that may go (`optional`, the least
needed first) and those that may be cut short with "…" (`squeeze`: column -> narrowest),
and the table drops and cuts only as much as its width asks, again on each resize.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.cells import cell_len
from textual import events
from textual.widgets import DataTable

from tui.terminal_text import table_cell, visible

PADDING = 2  # DataTable's cell padding, one cell each side


def clip(text: str, width: int) -> str:
    """`text` cut to `width` cells, its last one "…" when cut."""
    if cell_len(text) <= width:
        return text
    out = ""
    for ch in text:
        if cell_len(out + ch) > width - 1:
            break
        out += ch
    return out + "…"


def fit_columns(widths: Mapping[str, int], room: int, optional: Sequence[str] = (),
                squeeze: Mapping[str, int] | None = None) -> dict[str, int]:
    """The columns to show and each one's width so that they fit in `room` cells: the
    fewest optional columns dropped (in their order) that let every column show whole,
    else that let the squeezable ones fit cut short (the widest cut first); a room of 0
    (not laid out yet) keeps them all."""
    squeeze = squeeze or {}

    def total(ws: Mapping[str, int]) -> int:
        return sum(w + PADDING for w in ws.values())

    if room <= 0 or total(widths) <= room:
        return dict(widths)
    choices = [dict(widths)]
    for name in optional:
        choices.append({k: w for k, w in choices[-1].items() if k != name})
    for shown in choices:
        if total(shown) <= room:
            return shown
    for shown in choices:
        least = {k: min(w, squeeze.get(k, w)) for k, w in shown.items()}
        if total(least) <= room or shown is choices[-1]:
            cut = dict(shown)
            while total(cut) > room:
                over = [k for k in cut if cut[k] > squeeze.get(k, cut[k])]
                if not over:
                    break
                cut[max(over, key=lambda k: cut[k])] -= 1
            return cut
    return choices[-1]


def _natural(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> dict[str, int]:
    """Each column's width: its widest cell or its label."""
    return {label: max([cell_len(label), *(cell_len(visible(row[i])) for row in rows)])
            for i, label in enumerate(columns)}


class MeasuredTable(DataTable):
    """Rows of plain strings; each fill sets every column to its widest cell or label, then
    drops or cuts what the table's width cannot show."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._filled: tuple = ((), (), (), (), {})
        self._natural: dict[str, int] = {}  # each column's width, measured once a fill
        self._fitted: dict[str, int] = {}

    def fill(self, columns: Sequence[str], rows: Sequence[Sequence[str]],
             keys: Sequence[str], optional: Sequence[str] = (),
             squeeze: Mapping[str, int] | None = None) -> None:
        self._filled = (tuple(columns), [tuple(r) for r in rows], tuple(keys),
                        tuple(optional), dict(squeeze or {}))
        self._natural = _natural(columns, rows)
        self._draw(self._fit())

    def _room(self, n_rows: int) -> int:
        """The cells the columns may take: the width less the scrollbar `n_rows` bring
        (0 before the first layout)."""
        width = self.scrollable_content_region.width
        if not self.size.width:
            return 0
        if not self.show_vertical_scrollbar and n_rows + self.header_height > self.size.height:
            width -= self.styles.scrollbar_size_vertical
        return width

    def _fit(self) -> dict[str, int]:
        """The columns shown at the table's present width, and their widths."""
        _, rows, _, optional, squeeze = self._filled
        return fit_columns(self._natural, self._room(len(rows)), optional, squeeze)

    def _draw(self, fitted: dict[str, int]) -> None:
        columns, rows, keys, _, _ = self._filled
        self._fitted = fitted
        self.clear(columns=True)
        shown = [(i, label) for i, label in enumerate(columns) if label in self._fitted]
        for _, label in shown:
            self.add_column(clip(label, self._fitted[label]), width=self._fitted[label],
                            key=label)
        for row, key in zip(rows, keys, strict=True):
            self.add_row(*(table_cell(clip(visible(row[i]), self._fitted[label]))
                           for i, label in shown), key=key)

    def on_resize(self, event: events.Resize) -> None:
        """Fit the columns again when the width changes what shows; the cursor stays."""
        if self._filled[0] and (fitted := self._fit()) != self._fitted:
            row = self.cursor_row
            self._draw(fitted)
            if 0 <= row < self.row_count:
                self.move_cursor(row=row)
