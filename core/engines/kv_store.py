"""A bounded folder of KV-cache files for one model, so a conversation stays warm across
worker restarts, model switches and days.

Files live under the cache folder (core.paths.cache_dir()/kv, 0700; each file 0600), one
subfolder per model identity (its weights' paths, sizes and modification times, hashed:
a re-downloaded or re-imported model never meets the old model's caches). A file is named
by the hash of the token ids its cache covers. A new prompt takes the file sharing the
longest token prefix with it (the file's cache trimmed to that prefix); a file whose
tokens a newer one extends is dropped, since the newer one serves every prompt it could.
The whole kv folder, every model together, stays under one bound in bytes: least recently
used files (modification time, touched on every use) go first.

Writes run on a background thread (KvWriter) so a reply and the next request never wait
for the disk; any OSError there (a full disk) skips that write with a debug log line.
Nothing here logs conversation text or token ids.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.engines.kv_file import SUFFIX, BadKvFile, KvHeader, read_header, read_sections, write_file

log = logging.getLogger(__name__)

DEFAULT_GB = 4.0


def kv_root() -> Path:
    """The folder every model's cache files live under (private to the user)."""
    from core import paths

    return paths.cache_dir() / "kv"


def disk_budget_bytes(option: Any) -> int:
    """The store's bound: the engine option "kv_disk_gb" when given, else the setting
    (core.config kv_disk_gb); 0 turns the store off."""
    gb = option
    if gb is None:
        from core.config import Settings

        gb = getattr(Settings.load(), "kv_disk_gb", DEFAULT_GB)
    try:
        value = float(gb)
    except (TypeError, ValueError):
        return 0
    return int(value * 1024**3) if value > 0 else 0


def model_identity(engine: str, files: Iterable[Path], extra: str = "") -> str:
    """A hash that changes whenever the files that decide the cache's contents do
    (weights, config, tokenizer): their resolved paths, sizes and modification times."""
    h = hashlib.sha256(f"{engine}\n{extra}\n".encode())
    for f in sorted(Path(p).resolve() for p in files):
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def tokens_key(tokens: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype="<i8").tobytes()).hexdigest()[:40]


@dataclass(frozen=True)
class Match:
    """A stored file sharing `covered` tokens with a prompt."""

    path: Path
    header: KvHeader
    covered: int


class KvDiskStore:
    """One model's cache files; the bound covers every model's files under `root`."""

    def __init__(self, root: Path, identity: str, max_bytes: int) -> None:
        self.root = root
        self.identity = identity
        self.max_bytes = max_bytes
        self.folder = root / identity[:32]
        _private_dir(root)
        _private_dir(self.folder)
        self._lock = threading.Lock()
        self._index: dict[str, KvHeader] = {}
        self._seen: int | None = None  # the folder's mtime when last listed

    # -- reading (the engine's thread) -------------------------------------------------

    def best(self, prompt: Sequence[int], limit: int | None = None) -> Match | None:
        """The file covering the longest start of `prompt` (at most `limit` tokens)."""
        if len(prompt) < 2:
            return None
        self._refresh()
        arr = np.asarray(prompt, dtype=np.int64)
        limit = len(arr) - 1 if limit is None else min(limit, len(arr) - 1)
        best: Match | None = None
        with self._lock:
            items = list(self._index.items())
        for name, header in items:
            n = min(_common_prefix(header.tokens, arr), limit)
            if n > 0 and (best is None or n > best.covered):
                best = Match(self.folder / name, header, n)
        return best

    def tokens_for(self, text: str) -> tuple[list[int], int, tuple[tuple[int, int], ...]] | None:
        """The longest exact (text, token ids) start of `text` any file records: the ids
        a prompt keeps so re-tokenising an old reply cannot break the match."""
        self._refresh()
        with self._lock:
            headers = list(self._index.values())
        best: tuple[KvHeader, int] | None = None
        best_chars = 0
        for h in headers:
            if not h.text or not h.marks:
                continue
            for i in range(len(h.marks) - 1, -1, -1):
                chars = h.marks[i][0]
                if chars <= best_chars:
                    break
                if text.startswith(h.text[:chars]):
                    best, best_chars = (h, i), chars
                    break
        if best is None:
            return None
        h, i = best
        chars, count = h.marks[i]
        return h.tokens[:count].tolist(), chars, h.marks[: i + 1]

    def load(self, match: Match) -> dict[str, np.ndarray] | None:
        """The file's sections, checked; a bad file is removed and None returned."""
        try:
            header = read_header(match.path, self.identity)
            if not np.array_equal(header.tokens, match.header.tokens):
                raise BadKvFile("file changed under its index entry")
            sections = read_sections(match.path, header)
        except BadKvFile as exc:
            log.debug("kv cache file %s skipped and removed: %s", match.path.name, exc)
            self._forget(match.path.name, remove=True)
            return None
        try:
            os.utime(match.path)  # recently used: last to be evicted
        except OSError:
            pass
        return sections

    # -- writing (the writer's thread) -------------------------------------------------

    def put(self, tokens: Sequence[int], sections: Sequence[tuple[str, str, np.ndarray]],
            meta: dict[str, Any], text: str | None = None,
            marks: Sequence[tuple[int, int]] = ()) -> Path | None:
        """Store a cache covering `tokens`; drops files it supersedes, then evicts."""
        if not tokens or self.max_bytes <= 0:
            return None
        name = tokens_key(tokens) + SUFFIX
        path = self.folder / name
        _private_dir(self.root)
        _private_dir(self.folder)
        size = write_file(path, self.identity, tokens, sections, meta, text, marks)
        if size > self.max_bytes:
            path.unlink(missing_ok=True)
            return None
        header = read_header(path, self.identity)
        arr = header.tokens
        with self._lock:
            superseded = [n for n, h in self._index.items() if n != name
                          and len(h.tokens) < len(arr) and _common_prefix(h.tokens, arr) == len(h.tokens)]
            self._index[name] = header
        for n in superseded:
            self._forget(n, remove=True)
        self.evict()
        return path

    def evict(self) -> None:
        """Remove least recently used files (any model's) until the folder fits its bound."""
        files: list[tuple[int, int, Path]] = []
        total = 0
        try:
            folders = [d for d in self.root.iterdir() if d.is_dir()]
        except OSError:
            return
        for d in folders:
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if not e.name.endswith(SUFFIX):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                files.append((st.st_mtime_ns, st.st_size, Path(e.path)))
                total += st.st_size
        files.sort()
        for _, size, path in files:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            if path.parent == self.folder:
                self._forget(path.name)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(h.payload_at + h.nbytes for h in self._index.values())

    def __len__(self) -> int:
        self._refresh()
        with self._lock:
            return len(self._index)

    # -- index ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Re-list the folder when it changed (another worker of the model wrote, or the
        bound removed files); new files' headers are read and checked, bad ones removed."""
        try:
            seen = self.folder.stat().st_mtime_ns
        except OSError:
            return
        if seen == self._seen:
            return
        self._seen = seen
        try:
            names = {n for n in os.listdir(self.folder) if n.endswith(SUFFIX)}
        except OSError:
            return
        with self._lock:
            for gone in set(self._index) - names:
                del self._index[gone]
            known = set(self._index)
        for name in names - known:
            try:
                header = read_header(self.folder / name, self.identity)
            except BadKvFile as exc:
                log.debug("kv cache file %s skipped and removed: %s", name, exc)
                (self.folder / name).unlink(missing_ok=True)
                continue
            with self._lock:
                self._index[name] = header

    def _forget(self, name: str, remove: bool = False) -> None:
        with self._lock:
            self._index.pop(name, None)
        if remove:
            try:
                (self.folder / name).unlink(missing_ok=True)
            except OSError:
                pass


class KvWriter:
    """One background thread that runs cache writes in order, off the engine's loop.

    At most `depth` writes wait; a newer one past that is dropped (the next turn writes
    a longer cache anyway). `close` waits for what is queued, so a worker shut down
    between two turns leaves the first turn's cache on disk.
    """

    def __init__(self, depth: int = 2) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(depth)
        self._thread = threading.Thread(target=self._run, name="kv-disk-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        try:
            self._jobs.put_nowait(job)
            return True
        except queue.Full:
            log.debug("kv cache write skipped: the writer is busy")
            return False

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write has run (shutdown, benches); False on timeout."""
        end = time.monotonic() + timeout
        while self._jobs.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.005)
        return self._jobs.unfinished_tasks == 0

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        try:
            self._jobs.put_nowait(None)
        except queue.Full:
            return
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except (OSError, BadKvFile) as exc:
                log.debug("kv cache write skipped: %s", getattr(exc, "strerror", None) or exc)
            except Exception:  # noqa: BLE001 - a failed write must never take the worker down
                log.debug("kv cache write failed", exc_info=True)
            finally:
                self._jobs.task_done()


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except OSError:
        pass


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n
