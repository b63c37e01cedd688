"""Read a conversation export one message at a time, within limits, never whole.

An export can come from anywhere (another machine, a script, an attacker), and one of
10^6 messages (72 MiB) once took 44 s and a 3 GiB peak to import because json.loads built
the whole document first. This reader walks the top-level object of an export itself and
hands out the members one by one: the small header members as values, and each element
of the `messages` and `attachments` arrays as soon as it is complete. Memory is the
largest single element plus one read block, whatever the file's length.

Each value is decoded by the standard library's C decoder (`raw_decode`); a value that
does not decode yet is either cut by the end of the block (read more, up to the value's
limit) or not JSON. Which one is decided by a scan for the value's end that only jumps
between quotes and brackets, so a hostile value costs at most its limit to look at.

Only the standard library: ijson would do the walking, but it is not a dependency.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

READ_CHARS = 1 << 20  # one read block (characters after decoding)
KEY_CHARS = 256  # a member name of the export is a short word
SCALAR_CHARS = 64  # kept ahead of the cursor, so no number or literal is cut


@dataclass(frozen=True, slots=True)
class ExportLimits:
    """What one import may hold; each refusal names the limit it hit."""

    file_bytes: int = 256 * 1024 * 1024
    messages: int = 200_000
    message_bytes: int = 8 * 1024 * 1024  # one message's JSON (its text, reasoning, tools)
    attachments: int = 1_000
    attachment_bytes: int = 64 * 1024 * 1024  # one attachment's JSON (its extracted text)
    header_bytes: int = 1024 * 1024  # the conversation record and the other small members


class ExportTooLarge(Exception):
    """A limit was hit; `str(exc)` says which, as a clause ("it holds more than ...")."""


class ExportNotJson(Exception):
    """The text is not the JSON of an export; `str(exc)` says where."""


# Streamed arrays and the limits that apply to their elements.
ARRAYS = ("messages", "attachments")


class _Streamed:
    def __repr__(self) -> str:
        return "STREAMED"


STREAMED: Any = _Streamed()  # a member's value when its elements follow one by one


@dataclass(frozen=True, slots=True)
class Member:
    """A header member (`index` is None; `value` is STREAMED for `messages` or
    `attachments`, whose elements follow) or one element of a streamed array."""

    key: str
    value: Any
    index: int | None = None


_WS = re.compile(r"[ \t\n\r]*")
_STRUCT = re.compile(r'["\[\]{}]')
_STRING_STOP = re.compile(r'["\\]')
_DECODER = json.JSONDecoder()


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"


class _Text:
    """Decoded text from a file, a stream or a string, read block by block."""

    def __init__(self, source: str | bytes | IO[bytes] | IO[str], limits: ExportLimits) -> None:
        self._limits = limits
        self._source = source
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
        self._offset = 0  # for str/bytes sources: what was handed out so far
        self._bytes_read = 0
        self.eof = False
        if isinstance(source, str | bytes) and len(source) > limits.file_bytes:
            raise ExportTooLarge(f"it is {_mb(len(source))}, over the "
                                 f"{_mb(limits.file_bytes)} limit for an import")

    def read(self, want: int) -> str:
        """At least `want` characters' worth of the next block, or "" at the end."""
        want = max(want, READ_CHARS)
        source = self._source
        while not self.eof:
            if isinstance(source, str):
                piece = source[self._offset:self._offset + want]
                self._offset += len(piece)
                self.eof = self._offset >= len(source)
                if piece:
                    return piece
                continue
            if isinstance(source, bytes):
                block = source[self._offset:self._offset + want]
                self._offset += len(block)
                final = self._offset >= len(source)
            else:
                block = source.read(want)
                final = not block
                if isinstance(block, str):  # a text stream: already decoded
                    self._count(len(block))
                    self.eof = final
                    if block:
                        return block
                    continue
            self._count(len(block))
            try:
                text = self._decoder.decode(block, final=final)
            except UnicodeDecodeError:
                raise ExportNotJson(f"it is not UTF-8 text (around byte {self._bytes_read:,})") \
                    from None
            self.eof = final
            if text:
                return text
        return ""

    def _count(self, n: int) -> None:
        self._bytes_read += n
        if self._bytes_read > self._limits.file_bytes:
            raise ExportTooLarge(f"it is over the {_mb(self._limits.file_bytes)} limit "
                                 "for an import")


class _Reader:
    """A window on the decoded text: `buf[pos:]` is what is still to read."""

    def __init__(self, text: _Text) -> None:
        self._text = text
        self.buf = ""
        self.pos = 0

    def _more(self, want: int = READ_CHARS) -> bool:
        """Append a block (dropping what was read); False at the end of the text."""
        piece = self._text.read(want)
        if not piece:
            return False
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += piece
        return True

    def skip_ws(self) -> str:
        """Skip whitespace; the next character, or "" at the end."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, chars: str, where: str) -> str:
        c = self.skip_ws()
        if not c or c not in chars:
            shown = "the end of the file" if not c else repr(c)
            raise ExportNotJson(f"expected {' or '.join(map(repr, chars))} {where}, "
                                f"found {shown}")
        self.pos += 1
        return c

    def value(self, limit: int, what: str) -> Any:
        """Decode the JSON value at the cursor, reading on until it is whole, up to
        `limit` characters (ExportTooLarge past it, naming `what`)."""
        self.skip_ws()
        while len(self.buf) - self.pos < SCALAR_CHARS and self._more():
            pass  # a number or `true` is never cut by the end of the block
        while True:
            held = len(self.buf) - self.pos
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise ExportNotJson(f"{what} is nested too deeply") from None
            except json.JSONDecodeError as exc:
                complete = _value_end(self.buf, self.pos, self.pos + min(held, limit))
                if complete is not None:
                    raise ExportNotJson(f"{what} is not valid JSON ({exc.msg})") from None
                if held >= limit:
                    raise ExportTooLarge(f"{what} is over the {_mb(limit)} limit") from None
                if not self._more(held):
                    raise ExportNotJson(f"{what} is cut short by the end of the file") \
                        from None
                continue
            if end == len(self.buf) and self._more(held):
                continue  # a number may go on in the next block
            if end - self.pos > limit:
                raise ExportTooLarge(f"{what} is over the {_mb(limit)} limit")
            self.pos = end
            return value


def _value_end(text: str, start: int, stop: int) -> int | None:
    """Where the JSON value starting at `start` ends, if it ends before `stop`.

    Jumps from quote to bracket with two regular expressions (no per-character loop), so
    deciding "cut short" or "not JSON" costs one pass over at most `stop - start`."""
    if start >= stop:
        return None
    if text[start] not in '[{"':  # a number, true, null...: short, so a failure is bad JSON
        return start + 1
    depth, i = 0, start
    while True:
        m = _STRUCT.search(text, i, stop)
        if m is None:
            return None
        c, i = m.group(), m.end()
        if c == '"':
            while True:
                s = _STRING_STOP.search(text, i, stop)
                if s is None:
                    return None
                i = s.end() + (1 if s.group() == "\\" else 0)
                if s.group() == '"':
                    break
            if depth == 0:
                return i
        elif c in "[{":
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return i


def read_export(source: str | bytes | IO[bytes] | IO[str],
                limits: ExportLimits | None = None) -> Iterator[Member]:
    """The members of the export's top-level object, in file order, the elements of
    `messages` and `attachments` one by one. Raises ExportNotJson or ExportTooLarge;
    counts past the limits raise before the element over the limit is decoded."""
    limits = limits or ExportLimits()
    reader = _Reader(_Text(source, limits))
    reader.expect("{", "at the start")
    seen: set[str] = set()
    if reader.skip_ws() == "}":
        reader.pos += 1
    else:
        while True:
            key = reader.value(KEY_CHARS, "a member name")
            if not isinstance(key, str):
                raise ExportNotJson("a member name is not a string")
            if key in seen:
                raise ExportNotJson(f"it has two {key!r} members")
            seen.add(key)
            reader.expect(":", f"after {key!r}")
            if key in ARRAYS and reader.skip_ws() == "[":
                yield Member(key, STREAMED)
                yield from _elements(reader, key, limits)
            else:
                yield Member(key, reader.value(limits.header_bytes, f"its {key!r} member"))
            if reader.expect(",}", f"after the {key!r} member") == "}":
                break
    if reader.skip_ws():
        raise ExportNotJson("there is more text after the export")


def _elements(reader: _Reader, key: str, limits: ExportLimits) -> Iterator[Member]:
    most, size = ((limits.messages, limits.message_bytes) if key == "messages"
                  else (limits.attachments, limits.attachment_bytes))
    noun = key[:-1]
    reader.pos += 1  # the "["
    if reader.skip_ws() == "]":
        reader.pos += 1
        return
    index = 0
    while True:
        if index >= most:
            raise ExportTooLarge(f"it holds more than {most:,} {key}, the limit for one "
                                 "import")
        yield Member(key, reader.value(size, f"{noun} {index}"), index)
        index += 1
        if reader.expect(",]", f"after {noun} {index - 1}") == "]":
            return
