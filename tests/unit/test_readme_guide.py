"""The README is a guide that stays true: every key it names is bound and every key the app
binds is named; every slash command and every LLMDECK_* variable is documented; its
pictures are the guide's current snapshots."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen

import tui.screens
import tui.widgets
from tui.slash import COMMANDS
from tui.widgets.composer import NEWLINE_KEYS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Keys the composer handles itself (Composer._on_key), besides its bindings.
COMPOSER_KEYS = {"tab", "up", "down"} | set(NEWLINE_KEYS)
NAMES = {"esc": "escape", "/": "slash", "[": "left_square_bracket",
         "]": "right_square_bracket"}


def bound_keys() -> set[str]:
    """Every key in a BINDINGS list of the app, its screens and its widgets."""
    modules = ["tui.app"]
    modules += [f"tui.screens.{m.name}" for m in pkgutil.iter_modules(tui.screens.__path__)]
    modules += [f"tui.widgets.{m.name}" for m in pkgutil.iter_modules(tui.widgets.__path__)]
    keys: set[str] = set()
    for name in modules:
        for cls in vars(importlib.import_module(name)).values():
            if inspect.isclass(cls) and issubclass(cls, DOMNode) and cls.__module__ == name:
                for b in cls.__dict__.get("BINDINGS", []):
                    key = b.key if isinstance(b, Binding) else b[0]
                    keys |= {k.strip() for k in key.split(",")}
    return keys | COMPOSER_KEYS


def textual_keys() -> set[str]:
    """Keys Textual itself binds that the README may name (palette, focus moves)."""
    keys = {App.COMMAND_PALETTE_BINDING}
    for b in [*App.BINDINGS, *Screen.BINDINGS]:
        key = b.key if isinstance(b, Binding) else b[0]
        keys |= {k.strip() for k in key.split(",")}
    return keys


def readme_keys() -> set[str]:
    """Keys in the first column of every README table headed `| key |`."""
    keys: set[str] = set()
    for table in re.findall(r"^\| key \|.*?\n(?:\|.*\n)+", README, flags=re.M):
        for row in table.splitlines()[2:]:
            cell = row.split("|")[1].strip()
            for token in re.split(r",\s*|\s+/\s+", cell):
                token = token.strip().strip("`")
                if token:
                    keys.add(NAMES.get(token.lower(), token.lower()))
    return keys


def test_every_key_the_readme_names_is_bound_and_every_bound_key_is_named() -> None:
    named, bound = readme_keys(), bound_keys()
    assert "f3" in named and "ctrl+o" in named and "enter" in named  # the parser reads tables
    assert named - bound - textual_keys() == set(), "named in the README but bound nowhere"
    assert bound - named == set(), "bound but missing from the README's key tables"


def test_every_slash_command_is_documented() -> None:
    assert [c for c in COMMANDS if f"`{c}" not in README] == []


def test_every_llmdeck_variable_is_documented() -> None:
    used = set()
    for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("tui/**/*.py")]:
        used |= set(re.findall(r"[\"'](LLMDECK_[A-Z_]+)[\"']", path.read_text(encoding="utf-8")))
    assert "LLMDECK_HOME" in used
    assert [v for v in sorted(used) if f"| `{v}` |" not in README] == []


def test_the_pictures_are_the_guides_snapshots() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "docs"))
    from screenshots import PICTURES, SNAPSHOTS

    for test, picture in PICTURES.items():
        assert f"](docs/{picture})" in README
        assert (ROOT / "docs" / picture).read_bytes() == (SNAPSHOTS / f"{test}.svg").read_bytes(), \
            f"docs/{picture} is stale: run `.venv/bin/python docs/screenshots.py`"
