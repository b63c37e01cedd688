"""The TUI's faces of core.wire.text: `visible` for every widget that shows outside
text, and `table_cell` for DataTable cells, which Textual reads as markup."""

from __future__ import annotations

from core.wire.text import visible

__all__ = ["table_cell", "visible"]


def table_cell(text: str) -> str:
    """`text` for a DataTable cell: DataTable reads a str cell as Rich markup, so a model
    or folder named "[/]" raised MarkupError as the table drew; escaped, it shows as named."""
    from rich.markup import escape

    return escape(visible(text))
