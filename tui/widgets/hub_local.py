"""Models on this machine: format, engine, size, validity; load or delete one."""

from __future__ import annotations

from rich.cells import cell_len
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from core.hub import LocalModel
from tui.widgets import hub_format as fmt

COLUMNS = ("Model", "Format", "Engine", "Quant", "Role", "Size", "Source", "Valid")


class LocalTable(DataTable):
    """The local registry; posts LoadRequested / DeleteRequested for the row under the cursor."""

    BINDINGS = [
        Binding("l", "load", "Load"),
        Binding("enter", "load", "Load", show=False),
        Binding("delete", "delete", "Delete"),
        Binding("r", "refresh_list", "Refresh"),
    ]

    class LoadRequested(Message):
        def __init__(self, model: LocalModel) -> None:
            super().__init__()
            self.model = model

    class DeleteRequested(Message):
        def __init__(self, model: LocalModel) -> None:
            super().__init__()
            self.model = model

    class RefreshRequested(Message):
        pass

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.models: list[LocalModel] = []

    def on_mount(self) -> None:
        self.show([])

    def show(self, models: list[LocalModel], select: str | None = None) -> None:
        """Fill the table, keeping the cursor on `select` (a model id) when given.

        Column widths are measured here, not left to DataTable's auto width: that is
        worked out on the table's next Idle, which a table filled while its tab was hidden
        may not get before it is shown, and a row added then (a download just finished)
        was drawn cut to the old widths ("acme/gemma-3-270m-it-GGU", "hf-cach")."""
        previous = self.current.id if self.current else None
        self.models = list(models)
        rows = [_cells(m) for m in self.models]
        self.clear(columns=True)
        for i, label in enumerate(COLUMNS):
            width = max([cell_len(label), *(cell_len(row[i]) for row in rows)])
            self.add_column(label, width=width, key=label)
        for m, row in zip(self.models, rows, strict=True):
            self.add_row(*row, key=m.id)
        want = select or previous
        for i, m in enumerate(self.models):
            if m.id == want:
                self.move_cursor(row=i)
                break

    @property
    def current(self) -> LocalModel | None:
        if not self.models or not 0 <= self.cursor_row < len(self.models):
            return None
        return self.models[self.cursor_row]

    def action_load(self) -> None:
        if (m := self.current) is not None:
            self.post_message(self.LoadRequested(m))

    def action_delete(self) -> None:
        if (m := self.current) is not None:
            self.post_message(self.DeleteRequested(m))

    def action_refresh_list(self) -> None:
        self.post_message(self.RefreshRequested())


def _cells(m: LocalModel) -> tuple[str, ...]:
    """A model's row, one string per column of COLUMNS."""
    name = m.repo_id + "/" + m.name if m.repo_id and m.format == "gguf" else (m.repo_id or m.name)
    return (name, m.format, m.engine or "none", m.quant or "", m.role, fmt.size(m.size_bytes),
            m.source, "ok" if m.valid else f"✗ {m.problem}")
