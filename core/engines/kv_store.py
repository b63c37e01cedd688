"""A bounded folder of KV-cache files for one model, so a conversation stays warm across
worker restarts, model switches and days.

Files live under the cache folder (core.paths.cache_dir()/kv, 0700; each file 0600), one
subfolder per model identity (its weights' paths, sizes and modification times, hashed:
a re-downloaded or re-imported model never meets the old model's caches). A file is named
by the hash of the token ids its cache covers. A new prompt takes the file sharing the
longest token prefix with it (the file's cache trimmed to that prefix).

Chains: a conversation's next turn only adds tokens, so a cache that extends a stored one
(an engine that passes `axis`, MLX) is written as a link holding just the new tokens'
KV, naming its parent (core.engines.kv_file); its name is its tokens' hash then its
parent's ("<key>.<parent key>.kv"), so the parent relation is known from a listing.
Reading one loads the chain parent first, checking every link (model identity, the
parent's header hash, that the parent's tokens are the child's first tokens, each
section's checksum and shape); any bad or missing link makes the whole chain ignored and
removed (the links read, the bad one, the files its name says it is built on, and every
link built on any of them). A link whose parent file is simply gone is removed when the
folder is next listed; its ancestors, whole and checked on their own use, stay. A chain holds at most MAX_LINKS files: past that the cache is written whole
again (a 50-turn conversation is a few files to read, not 50), and the old chain, now a
prefix of the new file, is dropped. A file a newer one extends is dropped when it is no
ancestor of the newer one and nothing else extends it: the newer one serves every prompt
it could.

The whole kv folder, every model together, stays under one bound in bytes: least recently
used files (modification time) go first, and a file evicted takes every link that
extends it (a link is useless without its parent). Every use and every write touches the
whole chain, parents after children, so parents are never older than their descendants
and the LRU order meets a conversation's newest links first: eviction trims an idle
conversation from its end (its older prefix still serves a reopened conversation) rather
than dropping a whole chain at once. Treating a chain as one LRU unit was the
alternative; it would drop a shared prefix's other branches with it, and a long chain
would be one huge unit that the bound can only take whole.

Writes run on a background thread (KvWriter) so a reply and the next request never wait
for the disk; any OSError there (a full disk) skips that write with a debug log line.
Nothing here logs conversation text or token ids.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.engines.kv_file import (
    SUFFIX,
    BadKvFile,
    KvHeader,
    Parent,
    read_header,
    read_sections,
    write_file,
)

log = logging.getLogger(__name__)

DEFAULT_GB = 4.0
# The most files one chain has (a whole file and its links); the next write is whole.
MAX_LINKS = 8


def kv_root() -> Path:
    """The folder every model's cache files live under (private to the user)."""
    from core import paths

    return paths.cache_dir() / "kv"


def disk_budget_bytes(option: Any) -> int:
    """The store's bound: the engine option "kv_disk_gb" (the worker fills it in from the
    setting: core.workers.worker_main.with_settings), else DEFAULT_GB; 0 turns the store off."""
    gb = DEFAULT_GB if option is None else option
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
        names = {name for name, _ in items}
        for name, header in items:
            if header.parent is not None and header.parent.name not in names:
                continue  # a link whose parent is gone serves nothing
            n = min(_common_prefix(header.tokens, arr), limit)
            # on a tie the shorter file: fewer links to read
            if n > 0 and (best is None or n > best.covered or (
                    n == best.covered and len(header.tokens) < len(best.header.tokens))):
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

    def chain_bytes(self, match: Match) -> int:
        """Bytes of the sections a load of `match` reads (its whole chain, as indexed)."""
        names = self._chain_names(match.path.name)
        with self._lock:
            held = [self._index[n].nbytes for n in names if n in self._index]
        return sum(held) if held else match.header.nbytes

    def stored_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the longest stored cache they extend covers (with room in
        its chain): a writer need only copy out the positions past it (put's held_from)."""
        self._refresh()
        parent = self._parent_for(np.asarray(tokens, dtype=np.int64))
        return len(parent[1].tokens) if parent is not None else 0

    def load(self, match: Match, per_token: int | None = None) -> dict[str, np.ndarray] | None:
        """The cache's sections over all its tokens (a chain's links joined), checked; a
        bad file or chain is removed and None returned."""
        chain = self.load_chain(match, per_token)
        if chain is None:
            return None
        if len(chain) == 1:
            return chain[0][1]
        axis = chain[-1][0].axis
        return {name: np.concatenate([part[name] for _, part in chain], axis=axis)
                for name in chain[0][1]}

    def load_chain(self, match: Match, per_token: int | None = None, wait: bool = True,
                   hash: bool = True) -> list[tuple[KvHeader, dict[str, np.ndarray]]] | None:
        """Every file of the match's chain, parent first: (header, sections holding the
        positions [header.base, len(header.tokens)) along the leaf's `axis`). Each link is
        checked against the one it extends; any bad or missing link removes the chain.

        Before a section is read, the chain's size is checked against the cache's bound
        and, given `per_token` (the most bytes a token's cache can take for this model),
        against its tokens: a file claiming more than its tokens can hold is refused
        unread. wait=False: the checksums are still being computed on return (a loader
        copies meanwhile); `verify` must say True before anything of it is used. hash=False
        (with wait=False): the caller hashes what it copies (kv_file.copy_and_hash)."""
        names: list[str] = []
        headers: list[KvHeader] = []
        name = match.path.name
        digest: str | None
        # the file asked for is checked by its tokens (another worker of this model may
        # have rewritten it since it was listed); every parent by its header's hash too
        tokens, digest = match.header.tokens, None
        try:
            while True:
                if len(names) >= MAX_LINKS:
                    raise BadKvFile("chain longer than its bound")
                header = read_header(self.folder / name, self.identity, self.max_bytes)
                if (digest is not None and header.digest != digest) or not np.array_equal(
                        header.tokens, tokens):
                    raise BadKvFile("a link does not match what its child or index expects")
                if headers and header.depth != headers[-1].depth - 1:
                    raise BadKvFile("a link's depth does not follow its child's")
                names.append(name)
                headers.append(header)
                if header.parent is None:
                    break
                name, digest = header.parent.name, header.parent.sha256
                tokens = header.tokens[: header.parent.tokens]
            names.reverse()
            headers.reverse()
            if sum(h.payload_at + h.nbytes for h in headers) > self.max_bytes:
                raise BadKvFile("a chain larger than the cache's bound")
            if per_token is not None and any(
                    h.nbytes > per_token * (len(h.tokens) - h.base) for h in headers):
                raise BadKvFile("sections larger than their tokens' cache can be")
            chain = [(h, read_sections(self.folder / n, h, self.max_bytes, wait, hash or wait))
                     for n, h in zip(names, headers, strict=True)]
            _check_joinable(chain)
        except BadKvFile as exc:
            self._drop_chain(match, [*names, name], exc)
            return None
        self._touch(names)
        return chain

    def verify(self, match: Match, chain: list[tuple[KvHeader, dict[str, np.ndarray]]]) -> bool:
        """Wait for a chain's checksums (load_chain with wait=False); a mismatch removes
        the chain as load_chain would and says False."""
        try:
            for _, sections in chain:
                check = getattr(sections, "verify", None)
                if check is not None:
                    check()
        except BadKvFile as exc:
            self._drop_chain(match, self._chain_names(match.path.name) or [match.path.name], exc)
            return False
        return True

    def _drop_chain(self, match: Match, names: list[str], exc: Exception) -> None:
        log.debug("kv cache chain of %s skipped and removed: %s", match.path.name, exc)
        for n in {*names, *(a for x in names for a in self._named_ancestors(x))}:
            self._forget(n, remove=True)
        self._drop_orphans()

    # -- writing (the writer's thread) -------------------------------------------------

    def put(self, tokens: Sequence[int], sections: Sequence[tuple[str, str, np.ndarray]],
            meta: dict[str, Any], text: str | None = None,
            marks: Sequence[tuple[int, int]] = (), axis: int | None = None,
            pace: Callable[[], None] | None = None, held_from: int = 0) -> Path | None:
        """Store a cache covering `tokens`; drops files it supersedes, then evicts.
        `pace` is called before each section is hashed and written (KvWriter.wait_idle).
        `held_from`: the sections hold only positions [held_from, len(tokens)) along
        `axis` (stored_prefix said a parent covers the rest); when no stored parent covers
        that much any more, nothing is written.

        `axis`: the sections' token axis (each holds len(tokens) positions there). Given,
        the cache is written as a link of the longest stored prefix it extends (only the
        positions past it) unless that chain is full; without it, always whole."""
        if not tokens or self.max_bytes <= 0:
            return None
        self._refresh()
        arr = np.asarray(tokens, dtype=np.int64)
        key = tokens_key(tokens)
        with self._lock:
            same = [n for n, h in self._index.items()
                    if n.startswith(key) and np.array_equal(h.tokens, arr)]
        if same:  # already stored (a regenerated reply): keep it, and its children's links
            self._touch(self._chain_names(same[0]))
            return self.folder / same[0]
        parent = self._parent_for(arr) if axis is not None else None
        if held_from and (parent is None or len(parent[1].tokens) < held_from):
            return None  # the prefix these sections leave out is no longer stored
        link: Parent | None = None
        depth = 0
        if parent is not None:
            pname, pheader = parent
            base = len(pheader.tokens)
            link, depth = Parent(pname, pheader.digest, base), pheader.depth + 1
            cut = (slice(None),) * (axis or 0) + (slice(base - held_from, None),)
            sections = [(n, dtype, a[cut]) for n, dtype, a in sections]
        name = key + (f".{link.name[:40]}" if link is not None else "") + SUFFIX
        path = self.folder / name
        _private_dir(self.root)
        _private_dir(self.folder)
        size = write_file(path, self.identity, tokens, sections, meta, text, marks, link,
                          axis or 0, depth, pace)
        if size > self.max_bytes:
            path.unlink(missing_ok=True)
            return None
        header = read_header(path, self.identity, self.max_bytes)
        with self._lock:
            self._index[name] = header
        chain = self._chain_names(name)
        self._touch(chain)  # parents no older than this file: the LRU meets leaves first
        self._drop_superseded(arr, set(chain))
        self.evict()
        return path

    def _parent_for(self, arr: np.ndarray) -> tuple[str, KvHeader] | None:
        """The longest stored cache whose tokens `arr` extends, with room in its chain."""
        with self._lock:
            items = list(self._index.items())
        best: tuple[str, KvHeader] | None = None
        for name, h in items:
            if (len(h.tokens) < len(arr) and h.depth + 1 < MAX_LINKS
                    and (best is None or len(h.tokens) > len(best[1].tokens))
                    and _common_prefix(h.tokens, arr) == len(h.tokens)
                    and self._chain_names(name)):
                best = (name, h)
        return best

    def _chain_names(self, name: str) -> list[str]:
        """The names of `name`'s chain as the index knows it, parent first ([] when a
        link's parent is not indexed)."""
        out: list[str] = []
        with self._lock:
            while name in self._index and len(out) <= MAX_LINKS:
                out.append(name)
                parent = self._index[name].parent
                if parent is None:
                    return out[::-1]
                name = parent.name
        return []

    def _drop_superseded(self, arr: np.ndarray, keep: set[str]) -> None:
        """Drop files `arr` extends that are not in its chain and that nothing extends."""
        while True:
            with self._lock:
                parents = {h.parent.name for h in self._index.values() if h.parent is not None}
                gone = [n for n, h in self._index.items() if n not in keep and n not in parents
                        and len(h.tokens) < len(arr)
                        and _common_prefix(h.tokens, arr) == len(h.tokens)]
            if not gone:
                return
            for n in gone:
                self._forget(n, remove=True)

    def _touch(self, names: Sequence[str]) -> None:
        """Mark a chain used now, its leaf first (parents end up no older than it)."""
        for n in reversed(names):
            try:
                os.utime(self.folder / n)
            except OSError:
                pass

    def _named_ancestors(self, name: str) -> list[str]:
        """The files `name`'s name says it is built on (its parent key, that file's, ...),
        from a listing: a chain found broken is removed whole, whatever link broke."""
        try:
            by_key = {n.split(".")[0]: n for n in os.listdir(self.folder) if n.endswith(SUFFIX)}
        except OSError:
            return []
        out: list[str] = []
        while name.count(".") == 2 and len(out) < MAX_LINKS:
            parent = by_key.get(name.split(".")[1])
            if parent is None:
                break
            out.append(parent)
            name = parent
        return out

    def _drop_orphans(self) -> None:
        """Remove links whose parent file is gone (in this model's folder)."""
        try:
            names = [n for n in os.listdir(self.folder) if n.endswith(SUFFIX)]
        except OSError:
            return
        for n in _orphans(names):
            self._forget(n, remove=True)

    def evict(self) -> None:
        """Remove least recently used files (any model's) until the folder fits its bound;
        a file removed takes the links that extend it (their parent keys name it)."""
        files: list[tuple[int, int, Path]] = []
        sizes: dict[Path, int] = {}
        children: dict[tuple[Path, str], list[Path]] = {}
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
                if stat.S_ISDIR(st.st_mode):
                    continue
                path = Path(e.path)
                files.append((st.st_mtime_ns, st.st_size, path))
                sizes[path] = st.st_size
                total += st.st_size
                parts = e.name.split(".")
                if len(parts) == 3:
                    children.setdefault((d, parts[1]), []).append(path)
        files.sort()
        removed: set[Path] = set()
        for _, _, first in files:
            if total <= self.max_bytes:
                break
            todo = [first]
            while todo:
                path = todo.pop()
                if path in removed:
                    continue
                removed.add(path)
                path.unlink(missing_ok=True)
                total -= sizes[path]
                if path.parent == self.folder:
                    self._forget(path.name)
                todo.extend(children.get((path.parent, path.name.split(".")[0]), ()))

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
        for orphan in _orphans(list(names)):  # a link whose parent is gone serves nothing
            (self.folder / orphan).unlink(missing_ok=True)
            names.discard(orphan)
        with self._lock:
            for gone in set(self._index) - names:
                del self._index[gone]
            known = set(self._index)
        for name in names - known:
            try:
                header = read_header(self.folder / name, self.identity, self.max_bytes)
            except BadKvFile as exc:
                log.debug("kv cache file %s skipped and removed: %s", name, exc)
                try:
                    (self.folder / name).unlink(missing_ok=True)
                except OSError:  # a folder planted under a cache file's name
                    pass
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

    The engine says when it is busy (`busy(True)`: a prompt waits or a request runs); a
    write then pauses before its next piece (`wait_idle`) until the engine is idle again,
    so the disk, the checksums and the copies never compete with a prefill or a step
    (issue 49 item 1: they cost later turns 60% of their time to first token on a GPU).
    """

    def __init__(self, depth: int = 2) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(depth)
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="kv-disk-writer", daemon=True)
        self._thread.start()

    def busy(self, busy: bool) -> None:
        """The engine's state: a write waits while it is busy."""
        if busy:
            self._idle.clear()
        else:
            self._idle.set()

    def wait_idle(self) -> None:
        """Block the writer's thread until the engine is idle (a write's pieces call it)."""
        self._idle.wait()

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
        self._idle.set()  # the engine is done: what is queued may go now
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
                self._idle.wait()
                job()
            except (OSError, BadKvFile) as exc:
                log.debug("kv cache write skipped: %s", getattr(exc, "strerror", None) or exc)
            except Exception:  # noqa: BLE001 - a failed write must never take the worker down
                log.debug("kv cache write failed", exc_info=True)
            finally:
                self._jobs.task_done()


def _orphans(names: Sequence[str]) -> list[str]:
    """The links among `names` (one folder's files) whose chain misses a parent."""
    present = set(names)
    out: list[str] = []
    while True:
        keys = {n.split(".")[0] for n in present}
        gone = [n for n in present if n.count(".") == 2 and n.split(".")[1] not in keys]
        if not gone:
            return out
        out.extend(gone)
        present.difference_update(gone)


def _check_joinable(chain: list[tuple[KvHeader, dict[str, np.ndarray]]]) -> None:
    """Every link holds the same sections (name, dtype, shape but the token axis)."""
    axis = chain[-1][0].axis
    root = chain[0][0]
    for header, _ in chain[1:]:
        if header.axis != axis or len(header.sections) != len(root.sections):
            raise BadKvFile("links of one chain hold different sections")
        for a, b in zip(root.sections, header.sections, strict=True):
            if (a.name, a.dtype, len(a.shape)) != (b.name, b.dtype, len(b.shape)) or any(
                    x != y for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)) if i != axis):
                raise BadKvFile("links of one chain hold different sections")
    if len(chain) > 1 and any(not 0 <= axis < len(s.shape) or s.shape[axis] != len(root.tokens)
                              for s in root.sections):
        raise BadKvFile("a chain's first file does not hold its tokens")


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
