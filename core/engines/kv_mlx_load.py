"""How a KV-cache file's payload reaches the MLX device in one pass (issue 49 item 2).

The payload (a file's sections back to back) is handed to `mx.load` as one 1-D uint8
`.npy` array through a file object of our own (`PayloadStream`): MLX allocates the
array's buffer and asks the object to fill it, and the object fills it on the hashing
threads, each copying a section from the memory-mapped file and hashing what it copied.
So the bytes are read once, checked once, and the bytes checked are the bytes kept:

- on CUDA, MLX reads into a host buffer and copies it to device memory in one
  cudaMemcpy: plain device memory, not managed memory migrated page by page when a kernel
  first touches it (what a numpy view of an MLX array gives there: the old loader
  zeroed a device buffer, moved it to managed memory for the host to fill, and the first
  prefill then moved it back, page fault by page fault);
- on a CPU or Apple's unified memory, MLX's buffer is filled where it lies, its pages
  first touched by the copying threads in parallel (an `mx.zeros` buffer is zeroed on
  one thread first: 290-340 ms for a 478 MB file on a 2-core box, more than the read).

`kv_disk_copy = "managed"` loads into MLX's host (managed, on CUDA) memory instead and, on
CUDA, asks the driver to move it to the GPU in one prefetch (cudaMemPrefetchAsync, through
ctypes: MLX has no call for it); the GPU bench (bench/kvload.py) compares the two.

Nothing of it may be used before the section checksums pass (`PayloadStream.pending`,
checked by Sections.verify). `payload_to_device` is the whole step, used by a lookup and
by the cost model's idle-time probe (core.engines.kv_mlx).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from core.engines.kv_file import (
    _HASH_THREADS,
    BadKvFile,
    KvHeader,
    Section,
    Sections,
    _pool,
    _sha256,
    copy_and_hash,
    read_header,
    read_sections,
)

log = logging.getLogger(__name__)

COPIES = ("stream", "managed", "parallel", "single")  # kv_disk_copy
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
            return _sha256(memoryview(dst)) if whole else None

        jobs: list[tuple[Section, bool, Future[str | None]]] = []
        for s in self.wanted:
            lo = offsets[s.name]
            hi = lo + s.nbytes
            if hi <= at or lo >= end or s.nbytes == 0:
                continue
            whole = lo >= at and hi <= end
            jobs.append((s, whole, _pool().submit(one, max(lo, at), min(hi, end), whole)))
        for s, whole, job in jobs:
            digest = job.result()
            if whole and digest is not None:
                self._digests[s.name] = digest
            else:
                self._digests.pop(s.name, None)

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
                      managed: bool = False) -> mx.array:
    """The first `count` sections (None: all) of a file read with hash=False as one flat
    uint8 array on the device; their checksums are then in `sections.pending` (call
    sections.verify before any use). `managed`: MLX's host memory, prefetched to the GPU
    on CUDA (see the module docstring). BadKvFile when MLX could not load it."""
    stream = PayloadStream(sections, header, count)
    if stream.nbytes == 0:
        sections.pending = stream.pending()
        return mx.zeros((1,), mx.uint8)
    try:
        if managed:
            flat = mx.load(stream, format="npy", stream=mx.cpu)
        else:
            flat = mx.load(stream, format="npy")
    except (RuntimeError, ValueError) as exc:
        raise BadKvFile(f"could not load: {exc}") from exc
    if not isinstance(flat, mx.array) or flat.size != stream.nbytes:
        raise BadKvFile("the payload did not load whole")
    sections.pending = stream.pending()
    if managed and mx.cuda.is_available():
        prefetch(flat)
    return flat


def on_device(header: Any, sections: dict[str, np.ndarray],
              copy: str = "stream") -> dict[str, mx.array]:
    """A link's sections as device arrays: its whole payload in one copy, then views.
    `copy` (kv_disk_copy): "stream"/"managed" load it through mx.load, filled and hashed
    by the hashing threads (core.engines.kv_mlx_load); "parallel" has those threads copy
    into a zeroed device buffer; "single" is one mx.array copy (holding the GIL)."""
    payload = getattr(sections, "payload", None)
    offsets = getattr(sections, "offsets", None)
    if payload is None or offsets is None or any(s.name not in offsets for s in header.sections):
        if getattr(sections, "pending", ()) is None:
            copy_and_hash(sections, header, np.empty(header.nbytes, np.uint8))
        return {name: _to_mx(a) for name, a in sections.items()}
    unhashed = getattr(sections, "pending", ()) is None
    if unhashed and copy in ("stream", "managed"):
        flat = payload_to_device(sections, header, managed=copy == "managed")  # type: ignore[arg-type]
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


# The cost model's probe (probe_read): enough leading sections to keep every hashing
# thread busy (a load hashes one section a thread) or PROBE_BYTES, at most
# PROBE_MAX_BYTES; files under PROBE_MIN_BYTES say more about fixed costs than the rate.
PROBE_BYTES = 32 * 1024**2
PROBE_MAX_BYTES = 256 * 1024**2
PROBE_MIN_BYTES = 4 * 1024**2


def probe_read(path: Path, identity: str, max_bytes: int, copy: str) -> tuple[int, float] | None:
    """(bytes, seconds) of a timed read of the start of the cache file `path` through the
    load path a lookup takes (open, map, copy and hash, to the device, verified); None
    when the file is too small to say much, gone or bad. Bounded: see PROBE_BYTES."""
    started = time.perf_counter()
    try:
        header = read_header(path, identity, max_bytes)
        if header.nbytes < PROBE_MIN_BYTES:
            return None
        sections = read_sections(path, header, max_bytes, wait=False, hash=copy == "single")
        if copy in ("stream", "managed"):
            header = replace(header, sections=header.sections[: _probe_count(header.sections)])
        arrays = on_device(header, sections, copy)
        sections.verify()
        mx.eval(list(arrays.values()))
        mx.synchronize()
    except (BadKvFile, OSError) as exc:
        log.debug("kv cache read probe skipped: %s", getattr(exc, "strerror", None) or exc)
        return None
    return header.nbytes, time.perf_counter() - started


def _probe_count(sections: Sequence[Section]) -> int:
    count = total = 0
    for s in sections:
        if count and (total + s.nbytes > PROBE_MAX_BYTES
                      or (count >= _HASH_THREADS and total >= PROBE_BYTES)):
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


def prefetch(flat: mx.array) -> bool:
    """Move a managed-memory array to GPU 0 in one transfer and wait for it; False when
    the runtime's call is not found or fails (the pages then move as kernels touch them)."""
    lib = _cudart()
    if lib is None:
        return False
    ptr = ctypes.c_void_p(np.asarray(flat).ctypes.data)
    size = ctypes.c_size_t(flat.nbytes)
    version = ctypes.c_int(0)
    try:
        lib.cudaRuntimeGetVersion(ctypes.byref(version))
        if version.value >= 13000:
            err = lib.cudaMemPrefetchAsync(ptr, size, _MemLocation(1, 0), ctypes.c_uint(0),
                                           ctypes.c_void_p(0))
        else:
            err = lib.cudaMemPrefetchAsync(ptr, size, ctypes.c_int(0), ctypes.c_void_p(0))
        if err == 0:
            err = lib.cudaDeviceSynchronize()
    except (AttributeError, OSError) as exc:
        log.debug("kv cache prefetch unavailable: %s", exc)
        return False
    if err != 0:
        log.debug("kv cache prefetch failed: cuda error %s", err)
    global last_prefetch
    last_prefetch = err == 0
    return err == 0
