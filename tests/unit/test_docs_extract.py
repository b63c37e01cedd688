"""Extraction through the real markitdown keeps the page, slide and sheet of each text,
and bad input comes back as a DocError with a sentence a person can act on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from core.docs.errors import DocError
from core.docs.extract import ExtractedDoc, extract
from tests.fixtures.docs_files import (
    make_corrupt_pdf,
    make_csv,
    make_docx,
    make_encrypted_pdf,
    make_html,
    make_pdf,
    make_pptx,
    make_xlsx,
)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMDECK_HOME", str(tmp_path / "home"))


def _ok(result: ExtractedDoc | DocError) -> ExtractedDoc:
    assert isinstance(result, ExtractedDoc), result
    return result


def test_pdf_pages_are_labelled(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "report.pdf", ["Alpha page text.", "Bravo page text.", "Charlie."])
    doc = _ok(extract(path))
    assert doc.kind == "pdf"
    assert [s.label for s in doc.sections] == ["p.1", "p.2", "p.3"]
    assert "Bravo" in doc.sections[1].text and "Bravo" not in doc.sections[0].text
    assert doc.units == 3


def test_pdf_skips_blank_pages_but_keeps_numbering(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "gaps.pdf", ["First.", "", "Third."])
    doc = _ok(extract(path))
    assert [s.label for s in doc.sections] == ["p.1", "p.3"]


def test_pptx_slides_are_labelled(tmp_path: Path) -> None:
    path = make_pptx(
        tmp_path / "deck.pptx",
        [("Roadmap", "Ship the importer"), ("Risks", "Memory on small Macs"), ("Ask", "Two GPUs")],
    )
    doc = _ok(extract(path))
    assert [s.label for s in doc.sections] == ["slide 1", "slide 2", "slide 3"]
    assert "Memory on small Macs" in doc.sections[1].text
    assert "Ship the importer" not in doc.sections[1].text


def test_xlsx_sheets_are_labelled(tmp_path: Path) -> None:
    path = make_xlsx(
        tmp_path / "book.xlsx",
        {
            "Sales": [["region", "total"], ["north", 1200]],
            "Costs": [["item", "eur"], ["rent", 800]],
        },
    )
    doc = _ok(extract(path))
    assert [s.label for s in doc.sections] == ["sheet Sales", "sheet Costs"]
    assert "north" in doc.sections[0].text and "rent" in doc.sections[1].text


@pytest.mark.parametrize(
    ("name", "kind", "needle"),
    [
        ("notes.docx", "docx", "The audit closes in May"),
        ("page.html", "html", "The audit closes in May"),
        ("table.csv", "csv", "audit"),
        ("readme.md", "md", "The audit closes in May"),
        ("plain.txt", "txt", "The audit closes in May"),
    ],
)
def test_flat_formats_extract_as_one_unlabelled_section(
    tmp_path: Path, name: str, kind: str, needle: str
) -> None:
    path = tmp_path / name
    if kind == "docx":
        make_docx(path, ["The audit closes in May.", "Second paragraph."])
    elif kind == "html":
        make_html(path, "Status", "The audit closes in May.")
    elif kind == "csv":
        make_csv(path, [["task", "due"], ["audit", "May"]])
    else:
        path.write_text("# Status\n\nThe audit closes in May.\n", encoding="utf-8")
    doc = _ok(extract(path))
    assert doc.kind == kind
    assert [s.label for s in doc.sections] == [""]
    assert needle in doc.text
    if kind == "csv":
        assert "|" in doc.text  # markitdown renders the CSV as a Markdown table


def test_missing_path(tmp_path: Path) -> None:
    err = extract(tmp_path / "nope.pdf")
    assert isinstance(err, DocError) and err.code == "NOT_FOUND"
    assert "does not exist" in err.message


def test_directory(tmp_path: Path) -> None:
    err = extract(tmp_path)
    assert isinstance(err, DocError) and err.code == "IS_DIRECTORY"
    assert "folder" in err.message


def test_unsupported_type(tmp_path: Path) -> None:
    path = tmp_path / "tool.exe"
    path.write_bytes(b"MZ\x90\x00")
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "UNSUPPORTED_TYPE"
    assert "pdf" in err.message and "tool.exe" in err.message
    assert err.to_event().code == "UNSUPPORTED"


def test_file_over_the_size_limit_is_refused_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.pdf"
    subprocess.run(["truncate", "-s", "500M", str(path)], check=True)  # sparse: no disk used
    assert os.path.getsize(path) == 500 * 1024 * 1024
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "TOO_LARGE"
    assert "500 MB" in err.message and "20 MB" in err.message and "attach_max_mb" in err.message
    assert err.to_event().code == "BAD_REQUEST"


def test_size_limit_is_configurable(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "small.pdf", ["Some text."])
    assert isinstance(extract(path, max_bytes=10), DocError)
    assert isinstance(extract(path, max_bytes=10**6), ExtractedDoc)


def test_encrypted_pdf(tmp_path: Path) -> None:
    err = extract(make_encrypted_pdf(tmp_path / "locked.pdf"))
    assert isinstance(err, DocError) and err.code == "ENCRYPTED"
    assert "password" in err.message


def test_corrupt_pdf(tmp_path: Path) -> None:
    err = extract(make_corrupt_pdf(tmp_path / "broken.pdf"))
    assert isinstance(err, DocError) and err.code == "CORRUPT"
    assert "broken.pdf" in err.message


def test_corrupt_docx(tmp_path: Path) -> None:
    path = tmp_path / "broken.docx"
    path.write_bytes(b"this is not a zip archive at all" * 10)
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "CORRUPT"
    assert "re-save" in err.message and "broken.docx" in err.message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    err = extract(path)
    assert isinstance(err, DocError) and err.code == "EMPTY"
