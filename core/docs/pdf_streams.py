"""Check a PDF's compressed streams before a PDF reader unpacks them.

A page's content is a stream, usually FlateDecode (zlib); 1 MB of it can unpack to 1 GiB
of nothing, and pdfminer (under markitdown) unpacks a stream whole before it parses it:
a flate bomb once took the reader to 3 GiB and past a minute. Every stream of the file is
found by its `stream` keyword (compressed object streams are streams too) and unpacked
here in steps, only counted, never kept; past UNPACKED_FACTOR times the attachment limit
in all, the file is refused before any reader sees it. A stream that is not zlib data
(a JPEG, an encrypted stream) stops its own count at once and costs nothing.
"""

from __future__ import annotations

import mmap
import re
import zlib
from collections.abc import Callable
from pathlib import Path

from core.docs.errors import mb, refused

UNPACKED_FACTOR = 10  # all streams together: 10x the attachment limit
STEP_BYTES = 64 * 1024
_STREAM = re.compile(rb"stream\r?\n")

Progress = Callable[[str, int, int], None]


def check_pdf_streams(path: Path, max_bytes: int, progress: Progress | None = None) -> None:
    """Raise DocRefused when the streams of the PDF at `path` unpack to more than
    UNPACKED_FACTOR times `max_bytes`; memory is one step whatever they hold."""
    limit = UNPACKED_FACTOR * max_bytes
    total = 0
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        size = len(data)
        for found in _STREAM.finditer(data):
            total += _unpacked_size(data, found.end(), limit - total)
            if total > limit:
                raise refused("TOO_LARGE", f"{path.name} holds compressed content that "
                              f"unpacks to more than {mb(limit)}, {UNPACKED_FACTOR} times the "
                              f"{mb(max_bytes)} attachment limit (attach_max_mb in the config "
                              "file); a PDF built like this is made to overwhelm readers, so "
                              "it is not opened.", path)
            if progress is not None:
                progress("reading", found.end(), size)


def _unpacked_size(data: mmap.mmap, start: int, budget: int) -> int:
    """How many bytes the zlib stream at `start` unpacks to, counting no further than
    one step past `budget` (0 when it is not zlib data)."""
    inflater = zlib.decompressobj()
    produced, at = 0, start
    while at < len(data) and not inflater.eof:
        packed = data[at:at + STEP_BYTES]
        at += len(packed)
        while packed:
            try:
                out = inflater.decompress(packed, STEP_BYTES)
            except zlib.error:
                return produced
            produced += len(out)
            if produced > budget:
                return produced
            packed = inflater.unconsumed_tail
            if inflater.eof:
                break
    return produced
