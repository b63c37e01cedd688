"""Turn an attached file into text sections that remember where they came from.

markitdown does the conversion for the rich formats; what we add is the source location
(page of a PDF, slide of a deck, sheet of a workbook) so that chunks can cite
"[report.pdf p.3]", plus the checks that turn bad input into a `DocError` a person can
act on before any converter runs. Runs in a utility worker, never on the UI loop.

Plain text (.txt, .md) is read here, block by block, and never handed whole to a
converter: a 99 MiB file of NUL bytes once grew the app to 12.7 GB that way. Every text
format (those two, .csv and .html) is checked for NUL bytes as it is read (git's rule
for "binary"), so a binary file renamed .txt is refused with a sentence, not chunked.

Files built to attack a reader are refused before a converter sees them, each by a check
of its own that reads in small steps (office_zip: zip bombs, lying sizes, DTDs;
pdf_streams: flate bombs; markup_shape: HTML too deep or too big, endless CSV lines), and
the text a converter returns is capped. In the documents worker, `bounds` adds a memory
and a time limit (budget.py) for what no check foresaw.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.docs.budget import OverTime, ReadBounds, bounded, memory_error_in
from core.docs.errors import DocError, DocRefused
from core.docs.markup_shape import check_csv_lines, check_html_shape
from core.docs.office_zip import check_office_zip
from core.docs.pdf_streams import check_pdf_streams

DEFAULT_MAX_BYTES = 20 * 1024 * 1024  # Settings.attach_max_mb overrides it
BLOCK_BYTES = 1 << 20  # plain text is read and decoded one MiB at a time
SNIFF_BYTES = 8000  # a NUL in a text file's first 8000 bytes marks it binary, as git decides
TEXT_FACTOR = 2  # a document's text may be twice the attachment limit (in characters)

# (stage, done, total): "reading" in bytes, "pages" of a PDF, "embedding" in chunks.
Progress = Callable[[str, int, int], None]

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
        return DocError(
            "NOT_FOUND", f"{shown} does not exist; check the path and try again.", shown
        )
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
    info = p.stat()
    if not stat.S_ISREG(info.st_mode):
        return DocError(
            "UNREADABLE",
            f"{p.name} is not a regular file (a pipe, a device or a socket); attach the "
            "document itself.",
            shown,
        )
    if not os.access(p, os.R_OK):
        return DocError(
            "UNREADABLE",
            f"{p.name} cannot be read with your permissions; check who owns it (ls -l).",
            shown,
        )
    size = info.st_size
    if size > max_bytes:
        return DocError(
            "TOO_LARGE",
            f"{p.name} is {_mb(size)}, over the {_mb(max_bytes)} limit for attachments "
            "(attach_max_mb in the config file); split it or attach only the part you need.",
            shown,
        )
    if size == 0:
        return DocError("EMPTY", f"{p.name} is empty; there is nothing to read in it.", shown)
    return None


def extract(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
            progress: Progress | None = None,
            bounds: ReadBounds | None = None) -> ExtractedDoc | DocError:
    """Extract `path` into labelled sections, or say why it cannot be attached.

    `bounds` (the documents worker's; never the app's, whose process it would limit)
    caps the memory and time the reading may take, with a pulse of progress meanwhile."""
    refused = check_path(path, max_bytes)
    if refused is not None:
        return refused
    p = Path(path).expanduser()
    kind = SUPPORTED[p.suffix.lower()]
    report = progress or _no_progress
    if bounds is None:
        return _extract(p, kind, max_bytes, report, None)
    if kind not in _PLAIN:
        _markitdown()  # its start-up (imports, a model to guess types) is not the file's cost
    try:
        with bounded(bounds, report) as guarded:
            return _extract(p, kind, max_bytes, guarded, bounds)
    except OverTime:
        return DocError(
            "TIMEOUT",
            f"{p.name} took longer than {bounds.seconds:.0f} s to read, the limit for one "
            "document; attach a smaller part of it (or save it in a simpler format).",
            str(p),
        )


def _extract(p: Path, kind: str, max_bytes: int, report: Progress,
             bounds: ReadBounds | None) -> ExtractedDoc | DocError:
    try:
        sections = _sections(p, kind, max_bytes, report)
    except DocRefused as refused_err:
        return refused_err.error
    except Exception as exc:  # noqa: BLE001 - any converter failure is a broken file to the user
        if memory_error_in(exc):
            return _out_of_memory(p, bounds)
        return DocError(
            "CORRUPT",
            f"{p.name} could not be read as {kind.upper()} ({type(exc).__name__}); "
            "it may be damaged: open and re-save it, then attach it again.",
            str(p),
        )
    sections = [s for s in sections if s.text.strip()]
    if not sections:
        hint = " (a scanned PDF needs OCR first)" if kind == "pdf" else ""
        return DocError("EMPTY", f"{p.name} has no text to read{hint}.", str(p))
    chars = sum(len(s.text) for s in sections)
    if chars > TEXT_FACTOR * max_bytes:
        return DocError(
            "TOO_LARGE",
            f"{p.name} reads as {chars / 1e6:.0f} million characters of text, over "
            f"{TEXT_FACTOR} times the {_mb(max_bytes)} attachment limit (attach_max_mb in the "
            "config file); attach only the part you need.",
            str(p),
        )
    return ExtractedDoc(str(p), p.name, kind, p.stat().st_size, tuple(sections))


def _sections(p: Path, kind: str, max_bytes: int, report: Progress) -> list[Section]:
    """The checks for the file's kind, then its converter; raises DocRefused."""
    if kind in _PLAIN:
        return [Section("", _read_text(p, report).strip())]
    if kind == "pdf":
        check_pdf_streams(p, max_bytes, report)
        return _pdf_sections(p, report)
    if kind in _SNIFFED:
        _refuse_binary_sample(p)
        if kind == "html":
            check_html_shape(p)
        else:
            check_csv_lines(p)
    if kind in _OFFICE:
        if not _is_office_zip(p):
            raise DocRefused(
                DocError(
                    "CORRUPT",
                    f"{p.name} is not a valid {kind.upper()} file (it is not an Office "
                    "package); open and re-save it in its application, then attach it again.",
                    str(p),
                )
            )
        check_office_zip(p, max_bytes, report)
    markdown = _markitdown_file(p)
    if kind == "pptx":
        return _split_marked(markdown, _SLIDE_MARK, "slide {}")
    if kind == "xlsx":
        return _split_marked(markdown, _SHEET_MARK, "sheet {}", keep_heading=True)
    return [Section("", markdown.strip())]


def _out_of_memory(p: Path, bounds: ReadBounds | None) -> DocError:
    allowed = (f"more than the {_mb(bounds.memory_bytes)} of memory a document may use"
               if bounds is not None else "more memory than this machine has free")
    return DocError(
        "TOO_LARGE",
        f"{p.name} needs {allowed} to read; attach a smaller part of it.",
        str(p),
    )


_OFFICE = {"docx", "pptx", "xlsx"}
_PLAIN = {"txt", "md"}  # read here, streamed
_SNIFFED = {"csv", "html"}  # markitdown reads them, after a NUL check of samples


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


def _binary(p: Path, where: str) -> DocRefused:
    return DocRefused(DocError(
        "BINARY",
        f"{p.name} is not text: it holds NUL bytes ({where}), as binary files do. Attach "
        "the document it came from, or export it as text first.",
        str(p),
    ))


def _nul_heavy(block: bytes, first: bool) -> bool:
    """NUL in the first 8000 bytes (git's test), or more than 1% NUL in any block."""
    if first and b"\0" in block[:SNIFF_BYTES]:
        return True
    return block.count(b"\0") * 100 > len(block)


def _refuse_binary_sample(p: Path) -> None:
    """For files a converter reads whole: check the head, the middle and the tail."""
    size = p.stat().st_size
    with p.open("rb") as f:
        head = f.read(64 * 1024)
        if _nul_heavy(head, first=not _wide_bom(head)):
            raise _binary(p, "at its start")
        for offset in (size // 2, max(0, size - 64 * 1024)):
            f.seek(offset)
            if _nul_heavy(f.read(64 * 1024), first=False) and not _wide_bom(head):
                raise _binary(p, f"around byte {offset:,}")


_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


def _wide_bom(head: bytes) -> bool:
    """UTF-16/32 text is full of NUL bytes by design; its byte-order mark says so."""
    return any(head.startswith(bom) for bom, name in _BOMS if name != "utf-8-sig")


def _encoding(head: bytes) -> str:
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    try:
        head[: len(head) - 4].decode("utf-8")  # the cut may split one character
        return "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(head).best()
        if best is not None:
            return best.encoding
    except ImportError:
        pass
    return "latin-1"


def _read_text(p: Path, progress: Progress) -> str:
    """Decode a text file one block at a time (memory: the text plus one block),
    refusing it at the first NUL-heavy block and reporting bytes read."""
    total = p.stat().st_size
    parts: list[str] = []
    done = 0
    with p.open("rb") as f:
        block = f.read(BLOCK_BYTES)
        encoding = _encoding(block[:64 * 1024])
        wide = encoding in ("utf-16", "utf-32")
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        first = True
        while block:
            if not wide and _nul_heavy(block, first):
                raise _binary(p, "at its start" if first else f"around byte {done:,}")
            parts.append(decoder.decode(block))
            done += len(block)
            progress("reading", done, total)
            first = False
            block = f.read(BLOCK_BYTES)
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def _is_office_zip(p: Path) -> bool:
    """markitdown guesses by content and would read a broken .docx as plain text."""
    try:
        with zipfile.ZipFile(p) as archive:
            return "[Content_Types].xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False



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


def _text_of(result) -> str:
    # markitdown renamed text_content to markdown in 0.1; accept both.
    text = getattr(result, "markdown", None)
    return text if text is not None else result.text_content


def _markitdown_file(p: Path) -> str:
    return _text_of(_markitdown().convert(str(p)))


def _markitdown_pdf_bytes(buffer: io.BytesIO) -> str:
    buffer.seek(0)
    return _text_of(_markitdown().convert_stream(buffer, file_extension=".pdf"))


def _pdf_sections(p: Path, progress: Progress) -> list[Section]:
    """Pages of a PDF, each labelled "p.N".

    PDFium (pypdfium2, which markitdown's PDF support already installs) opens the file
    first: it tells an encrypted file from a damaged one, where markitdown would fail on
    both with the same opaque error, and it counts the pages. markitdown's text for
    prose PDFs (pdfminer) ends each page with a form feed; when that split matches the
    page count we use it, otherwise (form-style pages, where markitdown joins pages
    without a marker) each page is split out with PDFium and converted on its own.
    """
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(p), password="")
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise DocRefused(
                DocError(
                    "ENCRYPTED",
                    f"{p.name} is password-protected; save an unprotected copy and attach that.",
                    str(p),
                )
            ) from exc
        raise DocRefused(
            DocError(
                "CORRUPT",
                f"{p.name} is not a readable PDF; it may be damaged or incomplete: "
                "download or export it again.",
                str(p),
            )
        ) from exc
    try:
        count = len(pdf)
        # A file encrypted with an empty user password opened above; pdfminer and
        # pdfplumber under markitdown try the empty password too.
        markdown = _markitdown_file(p)
        pages = markdown.split("\f")
        if pages and not pages[-1].strip():
            pages = pages[:-1]
        if len(pages) != count:
            pages = []
            for i in range(count):
                pages.append(_markitdown_pdf_bytes(_pdf_copy(pdf, [i])))
                progress("pages", i + 1, count)
    finally:
        pdf.close()
    return [Section(f"p.{i + 1}", text.strip()) for i, text in enumerate(pages)]


def _pdf_copy(pdf, indices) -> io.BytesIO:
    import pypdfium2 as pdfium

    copy = pdfium.PdfDocument.new()
    try:
        copy.import_pages(pdf, list(indices))
        buffer = io.BytesIO()
        copy.save(buffer)
    finally:
        copy.close()
    return buffer


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
