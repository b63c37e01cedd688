"""One KV-cache file on disk: a header saying what it holds, then checksummed raw sections.

A cache file is data from a past run that the next run feeds straight into a model, so it
is read as data only (never unpickled), and a damaged, truncated or foreign file must be
recognised before any byte of it reaches an engine. Hence a format of our own, the same
for both engines (MLX's per-layer keys and values, llama.cpp's sequence state bytes):

    MAGIC | header length (8 bytes, little-endian) | header (JSON) | sections, back to back

The header names the model identity the file belongs to, the token ids its cache covers,
and each section's dtype, shape, size and SHA-256. The file's length must be exactly the
header's sum, so a truncated or padded file is refused before anything is hashed; each
section is hashed (in parallel: hashlib releases the GIL) before it is handed out.

A file is opened by its name inside its folder, never through a symbolic link, never
blocking (a FIFO under a cache file's name), and only if it is a regular file; its size
is checked against the header and the cache's bound before any section is touched, and
sections are memory-mapped rather than read into memory (issue 44 item 6).

A file may hold only the tokens past another file's (a link of a chain, see
core.engines.kv_store): its header's `parent` names that file, the SHA-256 of the
parent's header (which lists the parent's section hashes and its own parent's: a chain is
pinned end to end, like a Merkle list) and how many tokens the parent covers; its
sections then hold positions [parent's tokens, tokens) along `axis`. Its `tokens` are
still the whole prefix, so a child's header alone says what its chain covers.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import re
import stat
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.json_text import loads

MAGIC = b"LLMDECK-KV\x00\x01"
SUFFIX = ".kv"
# A header holds the token ids (about 7 bytes each as JSON) and a rendered prompt's text
# (at most 64 characters a token); 64 MiB covers a million-token context.
MAX_HEADER_BYTES = 64 * 1024**2
# No section holds more elements than this (256 Ti: far past any cache), counting an
# empty axis as 1; a header's shape is refused past it before numpy is asked to build it.
MAX_ELEMENTS = 2**48
MAX_AXES = 8  # a section's axes (MLX's keys have 4, a llama.cpp state 1)
# Stored dtype -> the numpy dtype its bytes are read as (bfloat16 travels as raw uint16).
DTYPES: dict[str, str] = {
    "float32": "<f4",
    "float16": "<f2",
    "bfloat16": "<u2",
    "uint8": "u1",
    "uint32": "<u4",
    "int32": "<i4",
}
HASH_THREADS = min(16, os.cpu_count() or 1)
# A cache file's name: the hash of its tokens, then (a link) its parent's token hash.
NAME = re.compile(r"[0-9a-f]{40}(\.[0-9a-f]{40})?\.kv")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class BadKvFile(ValueError):
    """A cache file that must not be used: the reason is for the debug log only."""


@dataclass(frozen=True)
class Section:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    sha256: str


@dataclass(frozen=True)
class Parent:
    """The file a link extends: its name, its header's SHA-256, the tokens it covers."""

    name: str
    sha256: str
    tokens: int


@dataclass(frozen=True)
class KvHeader:
    """What a cache file says about itself, checked against the file's length."""

    identity: str
    tokens: np.ndarray  # int64 token ids the cache covers
    sections: tuple[Section, ...]
    meta: dict[str, Any]
    payload_at: int  # where the first section starts
    text: str | None = None  # what the tokens spell (chat prompts), for exact re-use
    marks: tuple[tuple[int, int], ...] = ()  # (chars, tokens) exact boundaries in text
    digest: str = ""  # SHA-256 of the header's bytes: what a child names its parent by
    parent: Parent | None = None  # a link: the sections start at parent.tokens
    axis: int = 0  # the sections' token axis (links only)
    depth: int = 0  # links above this file (0: a whole file)

    @property
    def base(self) -> int:
        """The first token position the sections hold."""
        return self.parent.tokens if self.parent is not None else 0

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.sections)


def write_file(path: Path, identity: str, tokens: Sequence[int],
               sections: Sequence[tuple[str, str, np.ndarray]], meta: dict[str, Any],
               text: str | None = None, marks: Sequence[tuple[int, int]] = (),
               parent: Parent | None = None, axis: int = 0, depth: int = 0,
               pace: Callable[[], None] | None = None) -> int:
    """Write a cache file atomically (a private temp file renamed into place); returns
    its size. `sections` are (name, stored dtype, array of that dtype's bytes); a link
    (`parent`) holds only the positions past the parent's tokens along `axis`. `pace`
    is called before each section is hashed and before each is written (a writer
    yielding to its engine). OSError (a full disk, a folder gone) propagates: the caller
    decides it is harmless."""
    arrays = [np.ascontiguousarray(a) for _, _, a in sections]
    for (_, dtype, _), a in zip(sections, arrays, strict=True):
        if dtype not in DTYPES or a.dtype.itemsize != np.dtype(DTYPES[dtype]).itemsize:
            raise ValueError(f"section dtype {dtype} does not match array dtype {a.dtype}")
    if pace is None:
        digests = _hash_all([memoryview(a).cast("B") for a in arrays])
    else:
        digests = []
        for a in arrays:
            pace()
            digests.append(hashlib.sha256(memoryview(a).cast("B")).hexdigest())
    header: dict[str, Any] = {
        "identity": identity,
        "tokens": [int(t) for t in tokens],
        "sections": [
            {"name": name, "dtype": dtype, "shape": list(a.shape), "nbytes": int(a.nbytes),
             "sha256": digest}
            for (name, dtype, _), a, digest in zip(sections, arrays, digests, strict=True)
        ],
        "meta": meta,
    }
    if parent is not None:
        header["parent"] = {"name": parent.name, "sha256": parent.sha256, "tokens": parent.tokens}
        header["axis"], header["depth"] = axis, depth
    if text is not None:
        header["text"] = text
        header["marks"] = [list(m) for m in marks]
    from json import dumps

    blob = dumps(header, separators=(",", ":")).encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for a in arrays:
                if pace is not None:
                    pace()
                f.write(memoryview(a).cast("B"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(MAGIC) + 8 + len(blob) + sum(a.nbytes for a in arrays)


def open_file(path: Path) -> int:
    """A read-only descriptor of `path`, a regular file directly inside its folder.

    The name is opened relative to the folder (never a path that climbs out), without
    following a symbolic link (O_NOFOLLOW) and without blocking (O_NONBLOCK: a FIFO
    planted under a cache file's name opens at once instead of waiting for a writer),
    then refused unless fstat says it is a regular file. BadKvFile otherwise."""
    name = path.name
    if not name or name in (".", "..") or "/" in name or os.sep in name:
        raise BadKvFile("not a file name")
    flags = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        folder = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise BadKvFile(f"unreadable: {exc.strerror or exc}") from exc
    try:
        fd = os.open(name, flags, dir_fd=folder)
    except OSError as exc:  # ELOOP: a symbolic link
        raise BadKvFile(f"unreadable: {exc.strerror or exc}") from exc
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadKvFile("not a regular file")
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_header(path: Path, identity: str | None = None,
                max_bytes: int | None = None) -> KvHeader:
    """The file's header, checked for shape and length; BadKvFile when it is not a regular
    file of ours, belongs to another model (`identity`), is larger than the cache's bound
    (`max_bytes`), or its length does not add up."""
    fd = open_file(path)
    try:
        size = os.fstat(fd).st_size
        if max_bytes is not None and size > max_bytes:
            raise BadKvFile("larger than the cache's bound")
        head = _pread(fd, len(MAGIC) + 8, 0)
        if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
            raise BadKvFile("not a cache file")
        (length,) = struct.unpack("<Q", head[len(MAGIC):])
        if length > min(MAX_HEADER_BYTES, size - len(head)):
            raise BadKvFile("header length out of bounds")
        blob = _pread(fd, length, len(head))
    except OSError as exc:
        raise BadKvFile(f"unreadable: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(blob) != length:
        raise BadKvFile("truncated header")
    try:
        data = loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadKvFile("header is not JSON") from exc
    header = _parse(data, len(MAGIC) + 8 + length, hashlib.sha256(blob).hexdigest())
    if identity is not None and header.identity != identity:
        raise BadKvFile("another model's cache")
    if header.payload_at + header.nbytes != size:
        raise BadKvFile("file length does not match its header (truncated?)")
    return header


class Sections(dict):  # type: ignore[type-arg]
    """A file's sections by name (numpy views of `payload`, the file's sections back to
    back as bytes, memory-mapped): a loader may hand `payload` to a device in one copy.
    Read with wait=False, the checksums are still being computed: `verify()` waits for
    them and raises BadKvFile on a mismatch; nothing may be used before it returns."""

    payload: np.ndarray
    offsets: dict[str, int]
    # checksums being computed; None: read with hash=False, the caller must hash what it
    # copies (see copy_and_hash) before verify can pass
    pending: list[tuple[Section, Future[str]]] | None

    def verify(self) -> None:
        if self.pending is None:
            raise BadKvFile("read without checksums, and none were computed")
        for s, digest in self.pending:
            if digest.result() != s.sha256:
                raise BadKvFile(f"checksum mismatch in {s.name}")
        self.pending = []


def read_sections(path: Path, header: KvHeader, max_bytes: int | None = None,
                  wait: bool = True, hash: bool = True, populate: bool | None = None) -> Sections:
    """Every section as a numpy array, each checked against its SHA-256 first (wait=False:
    the checks run on threads while the caller copies; see Sections.verify).

    The file is memory-mapped, not read into memory: its length is checked against the
    header (and the cache's bound) before a byte is touched, and hashing reads it in the
    page cache, so a file that lies about its sections costs no process memory before its
    checksum refuses it. Cache files are only ever replaced by a rename, never rewritten
    in place, so the mapping cannot shrink under the reader.

    `populate` (default: when this call hashes) maps every page up front (MAP_POPULATE,
    one thread: 17 ms for 478 MB on a 2-core box, more than half of it again on an H200's
    host); a caller whose threads copy the sections (hash=False) maps lazily, and those
    threads fault the pages in as they copy, in parallel."""
    fd = open_file(path)
    try:
        size = os.fstat(fd).st_size
        if size != header.payload_at + header.nbytes:
            raise BadKvFile("file length does not match its header (changed?)")
        if max_bytes is not None and size > max_bytes:
            raise BadKvFile("larger than the cache's bound")
        # MAP_POPULATE: the kernel maps the whole (page-cached) file at once rather than
        # one page fault at a time under the hashing threads
        flags = mmap.MAP_SHARED | (_POPULATE if (hash if populate is None else populate) else 0)
        mapped = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ) if size else None
    except OSError as exc:
        raise BadKvFile(f"unreadable: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    payload = (np.frombuffer(mapped, dtype=np.uint8, count=header.nbytes, offset=header.payload_at)
               if mapped is not None and header.nbytes else np.zeros(0, np.uint8))
    views, offsets, at = [], {}, 0
    for s in header.sections:
        views.append(memoryview(payload[at: at + s.nbytes]))  # type: ignore[arg-type]
        offsets[s.name] = at
        at += s.nbytes
    out = Sections()
    out.payload, out.offsets = payload, offsets
    out.pending = ([(s, hash_pool().submit(sha256_hex, v)) for s, v in zip(header.sections, views, strict=True)]
                   if hash else None)
    if wait and hash:
        out.verify()
    for s, view in zip(header.sections, views, strict=True):
        out[s.name] = np.frombuffer(view, dtype=DTYPES[s.dtype]).reshape(s.shape)
    return out


def sha256_hex(view: memoryview) -> str:
    return hashlib.sha256(view).hexdigest()


def copy_and_hash(sections: Sections, header: KvHeader, into: np.ndarray) -> None:
    """Copy every section of a file read with hash=False into `into` (uint8, the payload's
    size: a device buffer's host view, say) on the hashing threads, each hashing what it
    copied; sections.verify then waits for them. One pass over the bytes instead of two,
    in parallel, and the bytes checked are the bytes kept."""
    def one(s: Section) -> str:
        at = sections.offsets[s.name]
        np.copyto(into[at: at + s.nbytes], sections.payload[at: at + s.nbytes])
        return sha256_hex(memoryview(into[at: at + s.nbytes]))

    sections.pending = [(s, hash_pool().submit(one, s)) for s in header.sections]


_POOL: ThreadPoolExecutor | None = None


def hash_pool() -> ThreadPoolExecutor:
    """The hashing threads, made once (hashlib releases the GIL on large buffers)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="kv-hash")
    return _POOL


def _pread(fd: int, n: int, at: int) -> bytes:
    """Up to n bytes at `at`, in pieces of at most 1 MiB (a short read ends it)."""
    parts: list[bytes] = []
    while n > 0:
        piece = os.pread(fd, min(n, 1 << 20), at)
        if not piece:
            break
        parts.append(piece)
        n -= len(piece)
        at += len(piece)
    return b"".join(parts)


def _hash_all(views: list[memoryview]) -> list[str]:
    if len(views) <= 1 or sum(v.nbytes for v in views) < 8 * 1024**2:
        return [hashlib.sha256(v).hexdigest() for v in views]
    with ThreadPoolExecutor(HASH_THREADS) as pool:
        return list(pool.map(lambda v: hashlib.sha256(v).hexdigest(), views))


def _parse(data: Any, payload_at: int, digest: str) -> KvHeader:
    """The header's fields, each of the type and range it must have."""
    if not isinstance(data, dict):
        raise BadKvFile("header is not an object")
    identity, tokens, sections, meta = (data.get(k) for k in ("identity", "tokens", "sections", "meta"))
    if not isinstance(identity, str) or not isinstance(meta, dict):
        raise BadKvFile("header lacks identity or meta")
    if not isinstance(tokens, list) or not tokens or not all(
            type(t) is int and 0 <= t < 2**31 for t in tokens):
        raise BadKvFile("bad token list")
    if not isinstance(sections, list):
        raise BadKvFile("bad section list")
    parsed: list[Section] = []
    for s in sections:
        if not isinstance(s, dict):
            raise BadKvFile("bad section")
        name, dtype, shape, nbytes, digest = (s.get(k) for k in ("name", "dtype", "shape", "nbytes", "sha256"))
        if (not isinstance(name, str) or dtype not in DTYPES or not isinstance(shape, list)
                or len(shape) > MAX_AXES or not all(type(d) is int and d >= 0 for d in shape)
                or math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS
                or type(nbytes) is not int or not isinstance(digest, str) or len(digest) != 64):
            raise BadKvFile("bad section")
        # math.prod in Python's ints: numpy's int64 product wraps ([2**32, 2**32] is 0
        # elements, the 0 bytes a planted file claims), and numpy then refuses the shape
        # with a ValueError the store does not expect
        if math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize != nbytes:
            raise BadKvFile(f"section {name}: shape does not match its size")
        parsed.append(Section(name, dtype, tuple(shape), nbytes, digest))
    text, marks = data.get("text"), data.get("marks", [])
    if text is not None and not isinstance(text, str):
        raise BadKvFile("bad text")
    if not isinstance(marks, list) or not all(
            isinstance(m, list) and len(m) == 2 and all(type(x) is int for x in m)
            and 0 < m[0] <= len(text or "") and 0 < m[1] <= len(tokens) for m in marks):
        raise BadKvFile("bad marks")
    parent, axis, depth = _parse_parent(data, len(tokens), parsed)
    return KvHeader(identity, np.asarray(tokens, dtype=np.int64), tuple(parsed), meta,
                    payload_at, text, tuple((m[0], m[1]) for m in marks), digest, parent,
                    axis, depth)


def _parse_parent(data: dict[str, Any], n_tokens: int,
                  sections: list[Section]) -> tuple[Parent | None, int, int]:
    """A link's parent, token axis and depth, each checked (its sections must hold exactly
    the tokens past the parent's along that axis)."""
    link = data.get("parent")
    if link is None:
        return None, 0, 0
    axis, depth = data.get("axis"), data.get("depth")
    if not isinstance(link, dict) or type(axis) is not int or type(depth) is not int or depth < 1:
        raise BadKvFile("bad parent link")
    name, digest, tokens = (link.get(k) for k in ("name", "sha256", "tokens"))
    if (not isinstance(name, str) or not NAME.fullmatch(name) or not isinstance(digest, str)
            or not re.fullmatch(r"[0-9a-f]{64}", digest) or type(tokens) is not int
            or not 0 < tokens < n_tokens):
        raise BadKvFile("bad parent link")
    if not sections or any(not 0 <= axis < len(s.shape) or s.shape[axis] != n_tokens - tokens
                           for s in sections):
        raise BadKvFile("a link's sections do not hold its new tokens")
    return Parent(name, digest, tokens), axis, depth
