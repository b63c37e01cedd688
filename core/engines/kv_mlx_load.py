"""How a KV-cache file's payload reaches the MLX device in one pass (issue 49 item 2).

The payload (a file's sections back to back) is handed to `mx.load` as one 1-D uint8
`.npy` array through a file object of our own (`PayloadStream`): MLX allocates the
array's buffer in host memory and asks the object to fill it, and the object fills it on
the hashing threads, each copying a section from the memory-mapped file and hashing what
it copied. So the bytes are read once, checked once, and the bytes checked are the bytes
kept. On a CPU or Apple's unified memory that buffer is where the model reads them, its
pages first touched by the copying threads in parallel (an `mx.zeros` buffer is zeroed on
one thread first: 290-340 ms for a 478 MB file on a 2-core box, more than the read).

On CUDA MLX's host memory is managed memory, which a kernel would pull over page fault by
page fault at the first prefill (55 ms for 478 MB on an H200, after the old loader's 71).
So each stretch of sections copied and checked is prefetched to the GPU as the copying
goes on (cudaMemPrefetchAsync, through ctypes: MLX has no call for it), the transfer
overlapping the copies of the rest: 74 ms in all for those 478 MB (bench/kvload.py). `kv_disk_copy` picks another way for benches:
"device" (mx.load on the GPU: MLX copies a pageable host buffer to device memory, 163 ms
for those 478 MB), "parallel" (the old loader) and "single" (one mx.array copy).

Nothing of it may be used before the section checksums pass (`PayloadStream.pending`,
checked by Sections.verify). `payload_to_device` is the whole step, used by a lookup and
by the cost model's idle-time probe (`probe_read`).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from core.engines.kv_file import (
    HASH_THREADS,
    BadKvFile,
    KvHeader,
    Section,
    Sections,
    copy_and_hash,
    hash_pool,
    read_header,
    read_sections,
    sha256_hex,
)

log = logging.getLogger(__name__)

COPIES = ("stream", "device", "parallel", "single")  # kv_disk_copy
_LOADED = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16,
           "uint32": mx.uint32, "uint8": mx.uint8, "int32": mx.int32}


def _npy_header(nbytes: int) -> bytes:
    """A version 1.0 .npy header for a 1-D uint8 array of `nbytes` (padded to 64)."""
    text = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({nbytes},), }}"
    pad = (64 - (10 + len(text) + 1) % 64) % 64
    return (b"\x93NUMPY\x01\x00" + (len(text) + pad + 1).to_bytes(2, "little")
            + text.encode("ascii") + b" " * pad + b"\n")


class PayloadStream:
    """A read-only file object holding a .npy header, then the first `count` sections'
    bytes of a file read with hash=False (see the module docstring). Only a section read
    whole is hashed; one read in pieces never verifies (MLX reads the payload in one
    call)."""

    closed = False
    name = "payload.npy"

    def __init__(self, sections: Sections, header: KvHeader, count: int | None = None) -> None:
        self._sections = sections
        self.wanted = header.sections[: len(header.sections) if count is None else count]
        self.nbytes = sum(s.nbytes for s in self.wanted)
        self._head = _npy_header(self.nbytes)
        self._pos = 0
        self._digests: dict[str, str] = {}
        # called with (first, end) addresses of bytes copied and checked, in order
        self.ready: Callable[[int, int], None] | None = None

    def seek(self, offset: int, whence: int = 0) -> int:
        end = len(self._head) + self.nbytes
        self._pos = offset if whence == 0 else (self._pos + offset if whence == 1 else end + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        want, done, head = len(out), 0, len(self._head)
        if self._pos < head:
            done = min(want, head - self._pos)
            out[:done] = self._head[self._pos: self._pos + done]
        if done < want:
            at = self._pos + done - head
            n = min(want - done, self.nbytes - at)
            if n > 0:
                self._fill(np.frombuffer(out[done: done + n], np.uint8), at)
                done += n
        self._pos += done
        return done

    def _fill(self, into: np.ndarray, at: int) -> None:
        """Copy payload bytes [at, at + len(into)) into `into` on the hashing threads,
        each whole section hashed as copied; returns when all are done (`into` is MLX's
        buffer, lent for this call only)."""
        end = at + into.size
        payload, offsets = self._sections.payload, self._sections.offsets

        def one(lo: int, hi: int, whole: bool) -> str | None:
            dst = into[lo - at: hi - at]
            np.copyto(dst, payload[lo:hi])
            return sha256_hex(memoryview(dst)) if whole else None

        jobs: list[tuple[Section, bool, Future[str | None]]] = []
        for s in self.wanted:
            lo = offsets[s.name]
            hi = lo + s.nbytes
            if hi <= at or lo >= end or s.nbytes == 0:
                continue
            whole = lo >= at and hi <= end
            jobs.append((s, whole, hash_pool().submit(one, max(lo, at), min(hi, end), whole)))
        base, sent = into.ctypes.data, into.ctypes.data
        for s, whole, job in jobs:
            digest = job.result()
            if whole and digest is not None:
                self._digests[s.name] = digest
            else:
                self._digests.pop(s.name, None)
            done = base + min(offsets[s.name] + s.nbytes, end) - at
            if self.ready is not None and done & ~(_ALIGN - 1) > sent:
                self.ready(sent, done & ~(_ALIGN - 1))
                sent = done & ~(_ALIGN - 1)
        if self.ready is not None and base + into.size > sent:
            self.ready(sent, base + into.size)

    def pending(self) -> list[tuple[Section, Future[str]]]:
        """The sections' checksums as Sections.verify takes them (all computed already;
        a section not read whole has none, so it mismatches)."""
        out: list[tuple[Section, Future[str]]] = []
        for s in self.wanted:
            done: Future[str] = Future()
            done.set_result(self._digests.get(s.name, "") if s.nbytes else s.sha256)
            out.append((s, done))
        return out


def payload_to_device(sections: Sections, header: KvHeader, count: int | None = None,
                      device: bool = False) -> mx.array:
    """The first `count` sections (None: all) of a file read with hash=False as one flat
    uint8 array, on the GPU once this returns; their checksums are then in
    `sections.pending` (call sections.verify before any use). `device`: loaded by MLX on
    the default device instead (see the module docstring). BadKvFile when MLX could not
    load it."""
    stream = PayloadStream(sections, header, count)
    if stream.nbytes == 0:
        sections.pending = stream.pending()
        return mx.zeros((1,), mx.uint8)
    move = None if device or not mx.cuda.is_available() else _Prefetch()
    stream.ready = move
    try:
        if device:
            flat = mx.load(stream, format="npy")
        else:
            flat = mx.load(stream, format="npy", stream=mx.cpu)
    except (RuntimeError, ValueError) as exc:
        raise BadKvFile(f"could not load: {exc}") from exc
    finally:
        if move is not None:
            move.finish()
    if not isinstance(flat, mx.array) or flat.size != stream.nbytes:
        raise BadKvFile("the payload did not load whole")
    sections.pending = stream.pending()
    return flat


def on_device(header: Any, sections: dict[str, np.ndarray],
              copy: str = "stream") -> dict[str, mx.array]:
    """A link's sections as device arrays: its whole payload in one copy, then views.
    `copy` (kv_disk_copy): "stream" and "device" load it through mx.load, filled and
    hashed by the hashing threads (see the module docstring); "parallel" has those threads
    copy into a zeroed device buffer; "single" is one mx.array copy (holding the GIL)."""
    payload = getattr(sections, "payload", None)
    offsets = getattr(sections, "offsets", None)
    if payload is None or offsets is None or any(s.name not in offsets for s in header.sections):
        if getattr(sections, "pending", ()) is None:
            copy_and_hash(sections, header, np.empty(header.nbytes, np.uint8))
        return {name: _to_mx(a) for name, a in sections.items()}
    unhashed = getattr(sections, "pending", ()) is None
    if unhashed and copy in ("stream", "device"):
        flat = payload_to_device(sections, header, device=copy == "device")  # type: ignore[arg-type]
    elif unhashed or copy == "parallel":
        flat = mx.zeros((max(int(payload.size), 1),), mx.uint8)
        mx.eval(flat)
        copy_and_hash(sections, header, np.asarray(flat))  # type: ignore[arg-type]
    else:
        flat = mx.array(payload)
    out = {}
    for s in header.sections:
        at = offsets[s.name]
        raw = flat[at: at + s.nbytes]
        out[s.name] = raw.view(_LOADED[s.dtype]).reshape(s.shape)
    return out


def _to_mx(a: np.ndarray) -> mx.array:
    if a.dtype == np.uint16:  # stored bfloat16
        return mx.array(np.ascontiguousarray(a)).view(mx.bfloat16)
    return mx.array(np.ascontiguousarray(a))


# The cost model's probe (probe_read): enough leading sections for two rounds of the
# hashing threads (a load hashes one section a thread) and PROBE_BYTES, at most
# PROBE_MAX_BYTES (about 40 ms on an H200's host, where the whole 478 MB load took 72):
# a load's fixed costs, scaled up with a small part, made the first probe estimate a
# whole load at 1.3-1.8x its time; files under PROBE_MIN_BYTES say more about fixed
# costs than the rate.
PROBE_BYTES = 64 * 1024**2
PROBE_MAX_BYTES = 256 * 1024**2
PROBE_MIN_BYTES = 4 * 1024**2


def probe_read(path: Path, identity: str, max_bytes: int, copy: str) -> tuple[int, float] | None:
    """(bytes, seconds) of a read of the whole cache file `path` through the load path a
    lookup takes (open, map, copy and hash, to the device, verified), estimated from a
    timed read of its start: the open and map as timed, the rest scaled by the file's
    bytes over the part read. None when the file is too small to say much, gone or bad.
    A section is loaded untimed first (the process's first load starts the hashing
    threads and finds the CUDA runtime). Bounded: see PROBE_BYTES."""
    started = time.perf_counter()
    try:
        header = read_header(path, identity, max_bytes)
        if header.nbytes < PROBE_MIN_BYTES:
            return None
        sections = read_sections(path, header, max_bytes, wait=False, hash=copy == "single")
        mapped = time.perf_counter()
        part = header
        if copy in ("stream", "device"):
            part = replace(header, sections=header.sections[: _probe_count(header.sections)])
            _load(replace(header, sections=header.sections[:1]), sections, copy)
        warm = time.perf_counter()
        _load(part, sections, copy)
    except (BadKvFile, OSError) as exc:
        log.debug("kv cache read probe skipped: %s", getattr(exc, "strerror", None) or exc)
        return None
    rest = (time.perf_counter() - warm) * header.nbytes / max(part.nbytes, 1)
    return header.nbytes, (mapped - started) + rest


def _load(header: KvHeader, sections: Sections, copy: str) -> None:
    if copy != "single":
        sections.pending = None  # unhashed: on_device copies and hashes (again)
    arrays = on_device(header, sections, copy)
    sections.verify()
    mx.eval(list(arrays.values()))
    mx.synchronize()


def _probe_count(sections: Sequence[Section]) -> int:
    count = total = 0
    for s in sections:
        if count and (total + s.nbytes > PROBE_MAX_BYTES
                      or (count >= 2 * HASH_THREADS and total >= PROBE_BYTES)):
            break
        count += 1
        total += s.nbytes
    return count


_CUDART: Any = None
last_prefetch: bool | None = None  # whether the last prefetch ran (benches)


def _cudart() -> Any:
    """The CUDA runtime MLX already loaded (None: not found)."""
    global _CUDART
    if _CUDART is None:
        _CUDART = False
        names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        try:
            with open("/proc/self/maps") as maps:
                names += sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
        except OSError:
            pass
        for name in names:
            try:
                _CUDART = ctypes.CDLL(name)
                break
            except OSError:
                continue
    return _CUDART or None


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


_ALIGN = 2 * 1024**2  # prefetched stretches end on this (a page part-written stays)


class _Prefetch:
    """Moves stretches of a managed-memory buffer to GPU 0 as they are ready (async), then
    waits for all (`finish`). Does nothing when the runtime's call is not found; the pages
    then move as kernels touch them."""

    def __init__(self) -> None:
        self._lib = _cudart()
        self._new_api = False
        self.ok = self._lib is not None
        if self._lib is not None:
            version = ctypes.c_int(0)
            try:
                self._lib.cudaRuntimeGetVersion(ctypes.byref(version))
            except (AttributeError, OSError):
                self.ok = False
            self._new_api = version.value >= 13000

    def __call__(self, first: int, end: int) -> None:
        if not self.ok or end <= first:
            return
        ptr, size = ctypes.c_void_p(first), ctypes.c_size_t(end - first)
        try:
            if self._new_api:
                err = self._lib.cudaMemPrefetchAsync(ptr, size, _MemLocation(1, 0),
                                                     ctypes.c_uint(0), ctypes.c_void_p(0))
            else:
                err = self._lib.cudaMemPrefetchAsync(ptr, size, ctypes.c_int(0),
                                                     ctypes.c_void_p(0))
        except (AttributeError, OSError) as exc:
            log.debug("kv cache prefetch unavailable: %s", exc)
            err = -1
        if err != 0:
            log.debug("kv cache prefetch failed: cuda error %s", err)
            self.ok = False

    def finish(self) -> None:
        global last_prefetch
        if self.ok and self._lib is not None:
            self.ok = self._lib.cudaDeviceSynchronize() == 0
        last_prefetch = self.ok
