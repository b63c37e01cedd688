"""Themes and stylesheets. Styles live in .tcss files here, never inline in Python."""

from __future__ import annotations

from pathlib import Path

THEMES_DIR = Path(__file__).parent


def stylesheets() -> list[Path]:
    """Every stylesheet the app loads: app.tcss first, then one per screen/area."""
    sheets = sorted(THEMES_DIR.glob("*.tcss"))
    sheets.sort(key=lambda p: (p.name != "app.tcss", p.name))
    return sheets
