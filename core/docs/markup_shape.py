"""Check the shape of an HTML page or a CSV table before markitdown builds it in memory.

markitdown parses HTML into a BeautifulSoup tree (an object of about a kilobyte per
element) and writes every CSV cell into a Markdown table: 19 MB of `<b>x</b>` ran past a
minute at 780 MB, 100,000 nested `<div>`s took 12 s, and one 19 MB CSV line of short
fields took 47 s to become 100 million characters. The file is small enough to read
(it is under the attachment limit), so it is scanned here with one regular expression,
and a page with more elements or deeper nesting than any real one, or a CSV line longer
than any real row, is refused with a sentence before the converter starts.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.docs.errors import mb, refused

MAX_ELEMENTS = 200_000
MAX_DEPTH = 1_000
MAX_CSV_LINE_BYTES = 1024 * 1024
STEP_BYTES = 1024 * 1024

# Tags, comments and the insides of script/style (whose text is not markup).
_TAG = re.compile(
    rb"<!--.*?(?:-->|$)|<(script|style)\b.*?(?:</\1\s*>|$)|<(/?)([a-zA-Z][a-zA-Z0-9:-]*)",
    re.DOTALL | re.IGNORECASE,
)
# Elements whose end tag old pages leave out: a second one closes the first.
_SIBLINGS = frozenset(b"p li dt dd tr td th option".split())
# Elements that never have content (no end tag), as the HTML standard lists them.
_VOID = frozenset(b"area base br col embed hr img input link meta param source track wbr "
                  b"basefont frame keygen".split())


def check_html_shape(path: Path, data: bytes | None = None) -> None:
    """Raise DocRefused for a page of more than MAX_ELEMENTS elements or nested deeper
    than MAX_DEPTH, counting about as a browser would (an end tag closes up to its open
    element, one without an open element is ignored, and `<p>` after an unclosed `<p>`,
    `<li>` after `<li>` and the like are siblings), so an old page of unclosed
    paragraphs is shallow."""
    data = path.read_bytes() if data is None else data
    stack: list[bytes] = []
    open_count: dict[bytes, int] = {}  # how many of each tag are open (membership in O(1))
    elements = 0
    for m in _TAG.finditer(data):
        tag = m.group(3)
        if tag is None:
            continue  # a comment, or a script or style element with its text
        tag = tag.lower()
        if m.group(2):  # an end tag
            if open_count.get(tag):
                while True:
                    closed = stack.pop()
                    open_count[closed] -= 1
                    if closed == tag:
                        break
            continue
        elements += 1
        if elements > MAX_ELEMENTS:
            raise refused("TOO_LARGE", f"{path.name} has more than {MAX_ELEMENTS:,} HTML "
                          "elements, more than any page llmdeck reads; save the part you "
                          "need as its own page.", path)
        if tag in _SIBLINGS and stack and stack[-1] == tag:
            stack.pop()
            open_count[tag] -= 1
        if tag not in _VOID:
            stack.append(tag)
            open_count[tag] = open_count.get(tag, 0) + 1
            if len(stack) > MAX_DEPTH:
                raise refused("UNSAFE", f"{path.name} nests its HTML elements more than "
                              f"{MAX_DEPTH:,} deep, which no real page does; it is not "
                              "opened.", path)


def check_csv_lines(path: Path) -> None:
    """Raise DocRefused at the first line longer than MAX_CSV_LINE_BYTES (a quoted
    newline counts as a line break here, so a real row is never measured too long)."""
    run = 0  # bytes since the last newline
    with path.open("rb") as f:
        while block := f.read(STEP_BYTES):
            lines = block.split(b"\n")
            if len(lines) > 1:
                run += len(lines[0])
                if run <= MAX_CSV_LINE_BYTES and len(lines) > 2:
                    run = max(len(line) for line in lines[1:-1])
                if run > MAX_CSV_LINE_BYTES:
                    break
                run = len(lines[-1])
            else:
                run += len(block)
            if run > MAX_CSV_LINE_BYTES:
                break
    if run > MAX_CSV_LINE_BYTES:
        raise refused("TOO_LARGE", f"{path.name} has a line over {mb(MAX_CSV_LINE_BYTES)} "
                      "long, longer than any row of a real table; check that it is a CSV "
                      "file, or split the line into rows.", path)
