"""Turn an attached file into text sections that remember where they came from.

markitdown does the conversion for every format; what we add is the source location
(page of a PDF, slide of a deck, sheet of a workbook) so that chunks can cite
"[report.pdf p.3]", plus the checks that turn bad input into a `DocError` a person can
act on before any converter runs. Runs in a utility worker, never on the UI loop.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from core.docs.errors import DocError

DEFAULT_MAX_BYTES = 100 * 1024 * 1024

# Extensions markitdown converts for us, and the kind each one is.
SUPPORTED: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".html": "html",
    ".htm": "html",
    ".csv": "csv",
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
}

_SLIDE_MARK = re.compile(r"^<!--\s*Slide number:\s*(\d+)\s*-->\s*$", re.MULTILINE)
_SHEET_MARK = re.compile(r"^## (.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text from one place in the source; `label` is "" for a whole file."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class ExtractedDoc:
    """The text of one file split by source location (page, slide, sheet)."""

    path: str
    name: str
    kind: str
    size_bytes: int
    sections: tuple[Section, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)

    @property
    def units(self) -> int:
        """Pages, slides or sheets; 1 for formats without such units (for pages/s)."""
        return max(1, len(self.sections))


def check_path(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> DocError | None:
    """Refuse what can be refused from the file system alone, before reading a byte."""
    p = Path(path).expanduser()
    shown = str(path)
    if not p.exists():
        return DocError("NOT_FOUND", f"{shown} does not exist; check the path and try again.", shown)
    if p.is_dir():
        return DocError(
            "IS_DIRECTORY",
            f"{shown} is a folder; attach the files inside it one by one.",
            shown,
        )
    kind = SUPPORTED.get(p.suffix.lower())
    if kind is None:
        names = ", ".join(sorted({k for k in SUPPORTED.values()}))
        return DocError(
            "UNSUPPORTED_TYPE",
            f"{p.name} is not a supported document type; attach one of: {names}.",
            shown,
        )
    size = p.stat().st_size
    if size > max_bytes:
        return DocError(
            "TOO_LARGE",
            f"{p.name} is {_mb(size)}, over the {_mb(max_bytes)} limit; "
            "split it or attach only the part you need.",
            shown,
        )
    if size == 0:
        return DocError("EMPTY", f"{p.name} is empty; there is nothing to read in it.", shown)
    return None


def extract(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ExtractedDoc | DocError:
    """Extract `path` into labelled sections, or say why it cannot be attached."""
    refused = check_path(path, max_bytes)
    if refused is not None:
        return refused
    p = Path(path).expanduser()
    kind = SUPPORTED[p.suffix.lower()]
    try:
        if kind == "pdf":
            sections = _pdf_sections(p)
        else:
            markdown = _markitdown_file(p)
            if kind == "pptx":
                sections = _split_marked(markdown, _SLIDE_MARK, "slide {}")
            elif kind == "xlsx":
                sections = _split_marked(markdown, _SHEET_MARK, "sheet {}", keep_heading=True)
            else:
                sections = [Section("", markdown.strip())]
    except _Refused as refused_err:
        return refused_err.error
    except Exception as exc:  # noqa: BLE001 - any converter failure is a broken file to the user
        return DocError(
            "CORRUPT",
            f"{p.name} could not be read as {kind.upper()} ({type(exc).__name__}); "
            "it may be damaged: open and re-save it, then attach it again.",
            str(path),
        )
    sections = [s for s in sections if s.text.strip()]
    if not sections:
        hint = " (a scanned PDF needs OCR first)" if kind == "pdf" else ""
        return DocError("EMPTY", f"{p.name} has no text to read{hint}.", str(path))
    return ExtractedDoc(str(p), p.name, kind, p.stat().st_size, tuple(sections))


class _Refused(Exception):
    def __init__(self, error: DocError) -> None:
        super().__init__(error.message)
        self.error = error


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.0f} MB"


_converter = None


def _markitdown():
    """One MarkItDown per process: building it registers every converter (slow-ish)."""
    global _converter
    if _converter is None:
        from markitdown import MarkItDown

        _converter = MarkItDown(enable_plugins=False)
    return _converter


def _markitdown_file(p: Path) -> str:
    return _markitdown().convert(str(p)).markdown


def _pdf_sections(p: Path) -> list[Section]:
    """Pages of a PDF, each labelled "p.N".

    pypdf opens the file first: it tells an encrypted file from a damaged one (markitdown
    would fail on both with the same opaque error) and counts the pages. markitdown's PDF
    text (pdfminer) ends each page with a form feed; when that split matches the page
    count we use it, otherwise each page is converted on its own.
    """
    from pypdf import PdfReader, PdfWriter
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(p))
        encrypted = reader.is_encrypted
        if encrypted and not reader.decrypt(""):
            raise _Refused(
                DocError(
                    "ENCRYPTED",
                    f"{p.name} is password-protected; save an unprotected copy and attach that.",
                    str(p),
                )
            )
        count = len(reader.pages)
    except _Refused:
        raise
    except (PdfReadError, ValueError, KeyError, OSError) as exc:
        raise _Refused(
            DocError(
                "CORRUPT",
                f"{p.name} is not a readable PDF ({exc.__class__.__name__}); it may be "
                "damaged or incomplete: download or export it again.",
                str(p),
            )
        ) from exc
    if encrypted:
        # Opened with the empty password: hand markitdown a decrypted copy.
        writer = PdfWriter()
        for page in reader.pages:
            writer.add_page(page)
        buffer = io.BytesIO()
        writer.write(buffer)
        buffer.seek(0)
        markdown = _markitdown().convert_stream(buffer, file_extension=".pdf").markdown
    else:
        markdown = _markitdown_file(p)
    pages = markdown.split("\f")
    if pages and not pages[-1].strip():
        pages = pages[:-1]
    if len(pages) != count:
        pages = [_pdf_page_text(reader, i) for i in range(count)]
    return [Section(f"p.{i + 1}", text.strip()) for i, text in enumerate(pages)]


def _pdf_page_text(reader, index: int) -> str:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_page(reader.pages[index])
    buffer = io.BytesIO()
    writer.write(buffer)
    buffer.seek(0)
    return _markitdown().convert_stream(buffer, file_extension=".pdf").markdown


def _split_marked(
    markdown: str, mark: re.Pattern[str], label: str, keep_heading: bool = False
) -> list[Section]:
    """Split markitdown output at its per-slide / per-sheet markers."""
    found = list(mark.finditer(markdown))
    if not found:
        return [Section("", markdown.strip())]
    sections = []
    head = markdown[: found[0].start()].strip()
    if head:
        sections.append(Section("", head))
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(markdown)
        start = m.start() if keep_heading else m.end()
        sections.append(Section(label.format(m.group(1).strip()), markdown[start:end].strip()))
    return sections
