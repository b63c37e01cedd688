"""A repo's files: sizes, quant labels, roles, and the projector that comes along."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from core.wire.hub import RepoFileInfo, RepoListing
from tui.terminal_text import table_cell
from tui.widgets import hub_format as fmt

COLUMNS = ("File", "Size", "Quant", "Role", "Comes with")


class FilesTable(DataTable):
    """The open repo's files; `d` or Enter asks for a download of the one under the cursor."""

    BINDINGS = [
        Binding("d", "download", "Download"),
        Binding("enter", "download", "Download", show=False),
    ]

    class DownloadRequested(Message):
        def __init__(self, listing: RepoListing, file: RepoFileInfo) -> None:
            super().__init__()
            self.listing = listing
            self.file = file

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.listing: RepoListing | None = None
        self.files: list[RepoFileInfo] = []

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def show(self, listing: RepoListing) -> None:
        """Model files first (the ones a person picks), then the rest."""
        self.listing = listing
        picks = {f.path for f in listing.model_files}
        self.files = sorted(listing.files, key=lambda f: (f.path not in picks, f.role is None,
                                                          f.path))
        self.clear()
        sizes = {f.path: f.size for f in listing.files}
        for f in self.files:
            extra = ""
            if f.mmproj:
                extra = f"+ {f.mmproj} ({fmt.size(sizes.get(f.mmproj))})"
            elif listing.format == "mlx" and f.path in picks:
                extra = "+ config, tokenizer"
            self.add_row(*(table_cell(cell) for cell in (
                f.path, fmt.size(f.size), f.quant or "", f.role or "", extra)), key=f.path)
        if picks:
            first = next(i for i, f in enumerate(self.files) if f.path in picks)
            self.move_cursor(row=first)

    def show_empty(self) -> None:
        self.listing = None
        self.files = []
        self.clear()

    @property
    def current(self) -> RepoFileInfo | None:
        if not self.files or not 0 <= self.cursor_row < len(self.files):
            return None
        return self.files[self.cursor_row]

    def action_download(self) -> None:
        if self.listing is not None and (f := self.current) is not None:
            self.post_message(self.DownloadRequested(self.listing, f))
