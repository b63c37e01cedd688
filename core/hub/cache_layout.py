"""The Hugging Face cache layout, written the way huggingface_hub reads it.

models--{owner}--{name}/blobs/{etag}            the bytes, named by their hash
models--{owner}--{name}/snapshots/{commit}/...  relative symlinks into blobs
models--{owner}--{name}/refs/{branch}           the commit a branch pointed to

A download only ever writes `blobs/{etag}.incomplete` (kept across crashes, so the next
pull resumes it) and renames it into place after its hash checks out; a snapshot link is
created last. So a half-downloaded or corrupt file is never visible under snapshots/,
which is where huggingface_hub and llmdeck's registry look.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def blob_path(cache: Path, repo_id: str, etag: str) -> Path:
    return repo_dir(cache, repo_id) / "blobs" / etag


def partial_path(cache: Path, repo_id: str, etag: str) -> Path:
    """Where bytes accumulate until verified; the name huggingface_hub 0.x used too."""
    return repo_dir(cache, repo_id) / "blobs" / f"{etag}.incomplete"


def lock_path(cache: Path, repo_id: str, etag: str) -> Path:
    """The same lock file huggingface_hub takes, so the two never write one blob at once."""
    return cache / ".locks" / ("models--" + repo_id.replace("/", "--")) / f"{etag}.lock"


def snapshot_dir(cache: Path, repo_id: str, commit: str) -> Path:
    return repo_dir(cache, repo_id) / "snapshots" / commit


def link_snapshot(cache: Path, repo_id: str, commit: str, filename: str, etag: str) -> Path:
    """Point snapshots/{commit}/{filename} at its blob; returns the snapshot path."""
    blob = blob_path(cache, repo_id, etag)
    pointer = snapshot_dir(cache, repo_id, commit) / filename
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except OSError:  # filesystems without symlinks: a copy still reads the same
        shutil.copyfile(blob, pointer)
    return pointer


def write_ref(cache: Path, repo_id: str, revision: str, commit: str) -> None:
    """Remember which commit a branch name resolved to (skipped for commit hashes)."""
    if revision == commit:
        return
    ref = repo_dir(cache, repo_id) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds `path` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free
