"""What the Hub says, checked before it names anything on disk.

A Hub answer (a mirror, a proxy, a man in the middle can all give one) names files: the
listing's `rfilename` becomes a path under snapshots/, the ETag a blob's and a lock's
name, the commit (X-Repo-Commit or the listing's sha) a snapshot folder, a revision a
file under refs/. Unchecked, `../../.zshrc` or `/etc/x` in any of them writes outside the
cache. huggingface_hub refuses a pointer path that leaves snapshots/ and a local-dir
name holding `..`; llmdeck is stricter, because it checks every name, not the joined
path alone: a commit is 40 hex digits, an etag a sha256 or a git sha1, a file name a
plain relative path with no control characters. `inside` is the last word on any path
before a byte is written.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from core.hub.errors import HubError
from core.terminal_text import visible

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# huggingface_hub's validate_repo_id: owner/name of word characters, '-', '.'; no '--'
# or '..' (which the cache's models--owner--name folder names could not tell apart).
_REPO_PART = r"[A-Za-z0-9_.\-]{1,96}"
REPO_ID_RE = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}")
MAX_PATH_CHARS = 1024
MAX_PART_BYTES = 255  # what macOS and Linux file systems allow in one name


def _control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def _refuse(what: str, value: str, why: str) -> HubError:
    shown = visible(value[:120]) + ("…" if len(value) > 120 else "")
    return HubError("UNSAFE", f"The Hub gave {what} {shown!r}, which {why}; llmdeck wrote "
                    "nothing for it. Check HF_ENDPOINT (a mirror or proxy may be hostile).")


def is_commit(value: str) -> bool:
    return COMMIT_RE.fullmatch(value) is not None


def is_hash_etag(value: str) -> bool:
    """A sha256 (LFS files) or a git blob sha1: the only etags a blob is named after."""
    return SHA256_RE.fullmatch(value) is not None or COMMIT_RE.fullmatch(value) is not None


def check_repo_id(repo_id: str) -> str:
    if (not isinstance(repo_id, str) or REPO_ID_RE.fullmatch(repo_id) is None
            or "--" in repo_id or ".." in repo_id
            or any(p[0] in "-." or p[-1] in "-." for p in repo_id.split("/"))):
        raise _refuse("a repo id", str(repo_id), "is not owner/name")
    return repo_id


def check_commit(commit: str) -> str:
    if not isinstance(commit, str) or not is_commit(commit):
        raise _refuse("a commit", str(commit), "is not 40 hex digits")
    return commit


def check_etag(etag: str) -> str:
    if not isinstance(etag, str) or not is_hash_etag(etag):
        raise _refuse("a file hash", str(etag), "is neither a sha256 nor a git sha1")
    return etag


def path_problem(name: str) -> str | None:
    """Why `name` (a repo file path, '/'-separated) is no safe relative path, or None."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if len(name) > MAX_PATH_CHARS:
        return "is too long"
    if "\0" in name or _control(name):
        return "holds control characters"
    if "\\" in name:
        return "holds a backslash"
    if name.startswith("/") or re.match(r"[A-Za-z]:(/|$)", name):
        return "is an absolute path"
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' part"
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for p in parts):
        return "has a part too long for a file name"
    return None


def check_repo_path(name: str, what: str = "a file name") -> str:
    if (why := path_problem(name)) is not None:
        raise _refuse(what, str(name), why)
    return name


def check_revision(revision: str) -> str:
    """A branch, tag or commit as a person typed it: it names a file under refs/."""
    return check_repo_path(revision, "a revision")


def inside(root: Path, path: Path) -> Path:
    """`path` when it resolves (links followed) to a place under `root`, else UNSAFE.

    The last component is not followed: a snapshot entry is itself a link into blobs/.
    """
    base = Path(root).resolve()
    where = Path(path).parent.resolve() / Path(path).name
    if where != base and base not in where.parents:
        raise _refuse("a path", str(PurePosixPath(path)), f"leads outside {base}")
    return path
