"""/attach parsing and path completion on a real folder tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tui.widgets.attachments import attach_hint, complete_attach, parse_paths


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "q1 summary.pdf").write_bytes(b"%PDF")
    (tmp_path / "reports" / "q2.pdf").write_bytes(b"%PDF")
    (tmp_path / "readme.md").write_text("hi")
    (tmp_path / ".hidden.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_paths_with_spaces_need_quotes_or_backslashes() -> None:
    assert parse_paths('a.pdf "my notes.docx" b\\ c.txt') == ["a.pdf", "my notes.docx", "b c.txt"]
    assert parse_paths('"unclosed.pdf') == ['"unclosed.pdf']


def test_tab_completes_a_unique_name_and_a_folder(tree: Path) -> None:
    assert complete_attach("/attach rep") == "/attach reports/"
    assert complete_attach("/attach rea") == "/attach readme.md "
    assert complete_attach("/attach reports/q") is None  # q1 and q2: nothing common to add
    assert complete_attach("/attach reports/q2") == "/attach reports/q2.pdf "
    assert complete_attach("/attach reports/q1") == "/attach reports/q1\\ summary.pdf "
    assert complete_attach("/attach a.pdf rea") == "/attach a.pdf readme.md "


def test_completion_keeps_to_visible_files_and_real_paths(tree: Path) -> None:
    assert complete_attach("/attach .hid") == "/attach .hidden.txt "
    assert complete_attach("/attach nothing-here") is None
    assert complete_attach("hello rea") is None  # only after /attach
    assert complete_attach(f"/attach {tree}{os.sep}rea") == f"/attach {tree}{os.sep}readme.md "


def test_hint_lists_candidates_or_says_nothing_matches(tree: Path) -> None:
    assert attach_hint("/attach reports/q") == "q1 summary.pdf  q2.pdf   (tab completes)"
    assert attach_hint("/attach zzz") == "No such file or folder here."
    assert attach_hint("just text") == ""


def test_an_escaped_space_stays_inside_the_path(tree: Path) -> None:
    assert complete_attach("/attach reports/q1\\ su") == "/attach reports/q1\\ summary.pdf "
    assert parse_paths("reports/q1\\ summary.pdf") == ["reports/q1 summary.pdf"]
