"""The Hugging Face cache layout, written the way huggingface_hub reads it.

models--{owner}--{name}/blobs/{etag}            the bytes, named by their hash
models--{owner}--{name}/snapshots/{commit}/...  relative symlinks into blobs
models--{owner}--{name}/refs/{branch}           the commit a branch pointed to

A download only ever writes `blobs/{etag}.incomplete` (kept across crashes, so the next
pull resumes it) and renames it into place after its hash checks out; a snapshot link is
created last. So a half-downloaded or corrupt file is never visible under snapshots/,
which is where huggingface_hub and llmdeck's registry look.

Every name here comes from the Hub (repo id, etag, commit, file name, revision), so
each function checks its part with core.hub.safe_names before it builds a path, and the
writers check the joined path sits under the cache: a hostile answer is refused here,
before any byte is written, whichever caller passed it on.

`blobs/{sha256}.unverified` beside a blob marks bytes the Hub offered no hash for; they
were named by their own sha256 and the registry shows them as unverified.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from core.hub.safe_names import (
    check_commit,
    check_etag,
    check_repo_id,
    check_repo_path,
    check_revision,
    inside,
)

UNVERIFIED_SUFFIX = ".unverified"


def repo_folder_name(repo_id: str) -> str:
    return "models--" + check_repo_id(repo_id).replace("/", "--")


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / repo_folder_name(repo_id)


def blob_path(cache: Path, repo_id: str, etag: str) -> Path:
    return repo_dir(cache, repo_id) / "blobs" / check_etag(etag)


def unverified_marker(cache: Path, repo_id: str, sha256: str) -> Path:
    """The mark beside a blob whose bytes no hash from the Hub vouched for."""
    blob = blob_path(cache, repo_id, sha256)
    return blob.with_name(blob.name + UNVERIFIED_SUFFIX)


def is_unverified(blob: Path) -> bool:
    return blob.with_name(blob.name + UNVERIFIED_SUFFIX).exists()


def partial_path(cache: Path, repo_id: str, etag: str) -> Path:
    """Where bytes accumulate until verified; the name huggingface_hub 0.x used too."""
    return repo_dir(cache, repo_id) / "blobs" / f"{check_etag(etag)}.incomplete"


def lock_path(cache: Path, repo_id: str, etag: str) -> Path:
    """The same lock file huggingface_hub takes, so the two never write one blob at once."""
    return cache / ".locks" / repo_folder_name(repo_id) / f"{check_etag(etag)}.lock"


def snapshot_dir(cache: Path, repo_id: str, commit: str) -> Path:
    return repo_dir(cache, repo_id) / "snapshots" / check_commit(commit)


def make_parent(cache: Path, path: Path) -> Path:
    """Create `path`'s folder once the path is known to stay under the cache; returns path."""
    inside(cache, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return inside(cache, path)  # again: a folder on the way may have been a link


def link_snapshot(cache: Path, repo_id: str, commit: str, filename: str, etag: str) -> Path:
    """Point snapshots/{commit}/{filename} at its blob; returns the snapshot path."""
    blob = blob_path(cache, repo_id, etag)
    pointer = snapshot_dir(cache, repo_id, commit) / check_repo_path(filename)
    make_parent(cache, pointer)
    inside(cache, blob)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except OSError:  # filesystems without symlinks: a copy still reads the same
        shutil.copyfile(blob, pointer)
    return pointer


def write_ref(cache: Path, repo_id: str, revision: str, commit: str) -> None:
    """Remember which commit a branch name resolved to (skipped for commit hashes)."""
    if revision == check_commit(commit):
        return
    ref = repo_dir(cache, repo_id) / "refs" / check_revision(revision)
    make_parent(cache, ref)
    ref.write_text(commit)


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds `path` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free
