"""Check an Office file (DOCX, XLSX, PPTX: a zip of XML parts) before a converter opens it.

The converters trust the zip: markitdown's DOCX path reads every part into memory at once
and parses the body twice (BeautifulSoup, then mammoth), Python's zipfile unpacks a
bzip2 part whole in one call whatever size the part declares, and lxml expands the
entities a DTD defines. So a file a person attaches is checked here first, reading only
the file itself, in 64 KiB steps:

- the zip's directory: at most MAX_ENTRIES parts and MAX_DIRECTORY_BYTES of directory,
  read from the end record before zipfile builds an object per part;
- each part: stored or deflated (what Office writes), not encrypted, its declared size
  summed against the limits, then actually unpacked (64 KiB at a time, counted, CRC
  checked): a part that unpacks to more or less than it declares lies and is refused;
- totals: everything at most UNPACKED_FACTOR times the attachment limit; the parts a
  converter parses (all but pictures, media and fonts) at most MARKUP_FACTOR times it;
- no part a parser reads may declare a DTD (`<!DOCTYPE`, where entities live: billion
  laughs, external entities reading local files) or a text encoding in which that
  marker could hide from this scan. Office never writes either.
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from core.docs.errors import mb, refused

MAX_ENTRIES = 10_000
MAX_DIRECTORY_BYTES = 4 * 1024 * 1024
UNPACKED_FACTOR = 10  # all parts together: 10x the attachment limit (pictures included)
MARKUP_FACTOR = 2  # the parts converters parse: 2x the attachment limit
STEP_BYTES = 64 * 1024

# Parts no converter parses as XML: their bytes count in the total, not in the markup.
MEDIA_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".jfif", ".gif", ".bmp", ".tif", ".tiff", ".ico", ".wdp",
    ".emf", ".wmf", ".emz", ".wmz", ".mp3", ".mp4", ".m4a", ".m4v", ".wav", ".wma", ".wmv",
    ".mov", ".avi", ".mpg", ".mpeg", ".bin", ".ttf", ".odttf", ".fntdata", ".otf",
})
_DTD_MARKS = tuple("<!DOCTYPE".encode(codec) for codec in ("ascii", "utf-16-le", "utf-16-be"))
_MARK_TAIL = max(len(m) for m in _DTD_MARKS) - 1
# Encodings in which "<!DOCTYPE" is one of the byte strings above.
_SCANNED_ENCODINGS = frozenset({
    "utf-8", "utf8", "utf-16", "utf16", "utf-16le", "utf-16be", "us-ascii", "ascii",
    "iso-8859-1", "latin-1", "latin1", "windows-1252", "cp1252",
})
_DECLARED = re.compile(rb"^\s*<\?xml[^>]{0,200}?encoding\s*=\s*[\"']([A-Za-z0-9._:-]{1,40})")
_OTHER_START = (b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00", b"\x00\x00\x00<", b"<\x00\x00\x00",
                b"\x4c\x6f\xa7\x94")  # UTF-32 and EBCDIC, whose markers the scan would miss
_END_RECORD = b"PK\x05\x06"
_LOCAL_HEADER = b"PK\x03\x04"

Progress = Callable[[str, int, int], None]


def check_office_zip(path: Path, max_bytes: int, progress: Progress | None = None) -> None:
    """Raise DocRefused if the Office file at `path` could overwhelm or trick a
    converter; returns quietly otherwise. Memory: one step; time: one pass of unpacking,
    stopped at the first limit hit."""
    name = path.name
    _check_directory(path, name)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError):
        return  # not a zip after all: the caller's own check says so
    with archive:
        parts = archive.infolist()
        if len(parts) > MAX_ENTRIES:
            raise _too_many(path, len(parts))
        total_limit, markup_limit = UNPACKED_FACTOR * max_bytes, MARKUP_FACTOR * max_bytes
        declared = sum(p.file_size for p in parts)
        declared_markup = sum(p.file_size for p in parts if _parsed(p.filename))
        if declared > total_limit:
            raise refused("TOO_LARGE", f"{name} unpacks to {mb(declared)}, over "
                          f"{UNPACKED_FACTOR} times the {mb(max_bytes)} attachment limit "
                          "(attach_max_mb in the config file); save the part you need as its "
                          "own file.", path)
        if declared_markup > markup_limit:
            raise _markup_too_large(path, declared_markup, max_bytes)
        done = markup = 0
        with path.open("rb") as raw:
            for part in parts:
                produced = _unpack(raw, part, path)
                done += produced
                if _parsed(part.filename):
                    markup += produced
                    if markup > markup_limit:
                        raise _markup_too_large(path, markup, max_bytes)
                if progress is not None:
                    progress("reading", min(done, declared), declared)


def _parsed(part_name: str) -> bool:
    return PurePosixPath(part_name).suffix.lower() not in MEDIA_SUFFIXES


def _too_many(path: Path, count: int | str) -> Exception:
    return refused("UNSAFE", f"{path.name} holds {count} parts, more than the "
                   f"{MAX_ENTRIES:,} an Office file of any size has; it was built to "
                   "overwhelm a reader, so it is not opened.", path)


def _markup_too_large(path: Path, size: int, max_bytes: int) -> Exception:
    return refused("TOO_LARGE", f"{path.name} holds {mb(size)} of XML, over "
                   f"{MARKUP_FACTOR} times the {mb(max_bytes)} attachment limit (attach_max_mb "
                   "in the config file); save the part you need as its own file.", path)


def _check_directory(path: Path, name: str) -> None:
    """Read the zip's end record: how many parts and how long a directory it announces,
    before zipfile builds a Python object for each of them."""
    size = path.stat().st_size
    with path.open("rb") as f:
        tail_start = max(0, size - (22 + 0xFFFF))
        f.seek(tail_start)
        tail = f.read()
    at = tail.rfind(_END_RECORD)
    if at < 0 or len(tail) - at < 22:
        return  # not a zip: said elsewhere
    # After the signature: disk numbers and this disk's count (skipped), then the total.
    entries, directory, offset = struct.unpack_from("<6xHII", tail, at + 4)
    if entries == 0xFFFF or directory == 0xFFFFFFFF or offset == 0xFFFFFFFF:
        raise _too_many(path, "more than 65,535")  # Zip64: only archives of gigabytes
    if entries > MAX_ENTRIES:
        raise _too_many(path, f"{entries:,}")
    if directory > MAX_DIRECTORY_BYTES:
        raise _too_many(path, f"a {mb(directory)} directory of")


def _unpack(raw, part: zipfile.ZipInfo, path: Path) -> int:
    """Unpack one part in steps, counting its bytes and checking its CRC and its text;
    returns its size. The count stops one step past what the part declares."""
    name = path.name
    if part.flag_bits & 0x1:
        raise refused("ENCRYPTED", f"{name} is password-protected; save an unprotected copy "
                      "and attach that.", path)
    if part.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise refused("UNSAFE", f"{name} packs its part {part.filename!r} with a compression "
                      "Office never uses; it may be built to overwhelm a reader, so it is not "
                      "opened. Re-save it from its application.", path)
    raw.seek(part.header_offset)
    header = raw.read(30)
    if len(header) < 30 or not header.startswith(_LOCAL_HEADER):
        raise _damaged(path)
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    raw.seek(part.header_offset + 30 + name_len + extra_len)
    inflater = zlib.decompressobj(-15) if part.compress_type == zipfile.ZIP_DEFLATED else None
    scan = _TextScan(path, part.filename) if _parsed(part.filename) else None
    left, produced, crc = part.compress_size, 0, 0
    while left > 0 and not (inflater is not None and inflater.eof):
        packed = raw.read(min(STEP_BYTES, left))
        if not packed:
            raise _damaged(path)
        left -= len(packed)
        while packed:
            if inflater is None:
                out, packed = packed, b""
            else:
                try:
                    out = inflater.decompress(packed, STEP_BYTES)
                except zlib.error:
                    raise _damaged(path) from None
                packed = inflater.unconsumed_tail
            produced += len(out)
            if produced > part.file_size:
                raise _lies(path, part)
            crc = zlib.crc32(out, crc)
            if scan is not None:
                scan.feed(out)
            if inflater is not None and inflater.eof:
                break
    if produced != part.file_size:
        raise _lies(path, part)
    if crc != part.CRC:
        raise _damaged(path)
    return produced


def _lies(path: Path, part: zipfile.ZipInfo) -> Exception:
    return refused("UNSAFE", f"{path.name} is not a genuine Office file: its part "
                   f"{part.filename!r} unpacks to a size other than the {part.file_size:,} "
                   "bytes it declares, a trick to overwhelm readers; it is not opened.", path)


def _damaged(path: Path) -> Exception:
    return refused("CORRUPT", f"{path.name} is damaged (its zip data does not check out); "
                   "open and re-save it in its application, then attach it again.", path)


class _TextScan:
    """Looks for a DTD in one part's bytes as they unpack (a marker may straddle steps)."""

    def __init__(self, path: Path, part: str) -> None:
        self.path, self.part = path, part
        self.tail = b""
        self.first = True

    def feed(self, data: bytes) -> None:
        if self.first:
            self.first = False
            self._check_encoding(data[:256])
        window = self.tail + data
        if any(mark in window for mark in _DTD_MARKS):
            raise refused("UNSAFE", f"{self.path.name} declares a DTD in its part "
                          f"{self.part!r}; Office never writes one, and its entities can "
                          "expand without end or read files on this machine, so it is not "
                          "opened.", self.path)
        self.tail = window[-_MARK_TAIL:]

    def _check_encoding(self, head: bytes) -> None:
        declared = _DECLARED.match(head.removeprefix(b"\xef\xbb\xbf"))
        encoding = declared.group(1).decode("ascii").lower() if declared else None
        if head.startswith(_OTHER_START) or (encoding and encoding not in _SCANNED_ENCODINGS):
            shown = encoding or "UTF-32 or EBCDIC"
            raise refused("UNSAFE", f"{self.path.name} writes its part {self.part!r} in the "
                          f"{shown} text encoding, which Office never uses; it is not opened.",
                          self.path)
