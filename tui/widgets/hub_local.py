"""Models on this machine: format, engine, size, validity, which are loaded and what each
takes; load or delete one."""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding
from textual.message import Message

from core.wire.hub import LocalModel
from core.wire.workers import WorkerStatus
from tui.widgets import hub_format as fmt
from tui.widgets.measured_table import MeasuredTable

COLUMNS = ("Model", "Format", "Engine", "Quant", "Role", "Size", "Loaded", "Source", "Valid")
# What a narrow terminal drops first (the engine says the format), and cuts short: the
# file or folder name after the id, then a problem's words (`l` on the row says it whole).
OPTIONAL = ("Format", "Source")
SQUEEZE = {"Model": 24, "Valid": 14}


class LocalTable(MeasuredTable):
    """The local registry; posts LoadRequested / DeleteRequested for the row under the cursor."""

    BINDINGS = [
        Binding("l", "load", "Load"),
        Binding("enter", "load", "Load", show=False),
        Binding("v", "use('vision')", "Vision model"),
        Binding("f", "use('draft')", "Draft model"),
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

    class UseRequested(Message):
        """Make the model the vision model (describes images for text models) or the
        draft model (guesses tokens for the MLX chat model); again on it clears the role."""

        def __init__(self, model: LocalModel, role: str) -> None:
            super().__init__()
            self.model = model
            self.role = role  # "vision" | "draft"

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.models: list[LocalModel] = []
        self.loaded: dict[Path, list[WorkerStatus]] = {}
        self.uses: dict[Path, str] = {}  # "vision model", "draft model": shown in Role

    def on_mount(self) -> None:
        self.show([])

    def show(self, models: list[LocalModel], select: str | None = None,
             loaded: list[WorkerStatus] | None = None,
             uses: dict[Path, str] | None = None) -> None:
        """Fill the table, keeping the cursor on `select` (a model id) when given;
        `loaded`: the pool's workers now (the Loaded column), else the last ones given."""
        previous = self.current.id if self.current else None
        self.models = list(models)
        if uses is not None:
            self.uses = dict(uses)
        if loaded is not None:
            self.loaded = {}
            for w in loaded:
                if w.path and w.state in ("idle", "busy", "loading"):
                    self.loaded.setdefault(Path(w.path).expanduser(), []).append(w)
        self.fill(COLUMNS, [_cells(m, self.loaded.get(m.path, []), self.uses.get(m.path))
                            for m in self.models], [m.id for m in self.models],
                  optional=OPTIONAL, squeeze=SQUEEZE)
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

    def action_use(self, role: str) -> None:
        if (m := self.current) is not None:
            self.post_message(self.UseRequested(m, role))

    def action_delete(self) -> None:
        if (m := self.current) is not None:
            self.post_message(self.DeleteRequested(m))

    def action_refresh_list(self) -> None:
        self.post_message(self.RefreshRequested())


def _cells(m: LocalModel, workers: list[WorkerStatus], use: str | None) -> tuple[str, ...]:
    """A model's row, one string per column of COLUMNS."""
    # The one id first (issue 45), then where it came from: the repo (the id already says
    # the quant), or the file or folder name in the models folder.
    where = m.repo_id or m.name
    name = f"{m.model_id}  {where}" if m.model_id else where
    role = f"{m.role}, {use}" if use else m.role
    return (name, m.format, m.engine or "none", m.quant or "", role, fmt.size(m.size_bytes),
            _loaded(workers), m.source, _state(m))


def _loaded(workers: list[WorkerStatus]) -> str:
    """What a loaded model takes ('0.3 GB'); its last use and time left are in the lines
    under the table (hub screen), where they do not push Source and Valid off the screen."""
    if not workers:
        return ""
    if all(w.state == "loading" for w in workers):
        return "loading"
    return fmt.size(sum(w.memory_bytes for w in workers) or sum(w.rss_bytes for w in workers))


def _state(m: LocalModel) -> str:
    """Usable or not, and whether every file was checked against the Hub's hash."""
    if not m.valid:
        return f"✗ {m.problem}"
    return "ok" if m.verified else "ok, unverified"  # no hash from the Hub (README)
