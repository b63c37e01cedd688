"""The hub's plain data as the UI shows it: search rows, a repo's files, local models,
recommendations and their fit, download progress, the hub's error, and byte sizes.

These cross the socket (core.service.codec) and are drawn by tui/; the searching,
listing, downloading and memory arithmetic that fill them stay in core.hub, which
re-exports every name here from its face.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from core.model_files.names import gguf_shard, is_gguf, is_mmproj
from core.wire.text import visible

# What mlx-lm reads from a model directory; everything else (README, images, .bin) stays.
MLX_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json",
                "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                "special_tokens_map.json", "generation_config.json", "chat_template.jinja",
                "chat_template.json", "vocab.json", "merges.txt", "added_tokens.json",
                "preprocessor_config.json", "processor_config.json")

State = Literal["queued", "downloading", "verifying", "done", "error", "cancelled"]

HUB_ERROR_CODES = frozenset(
    {
        "GATED",  # repo needs its terms accepted (and a token)
        "AUTH",  # token missing or rejected
        "NOT_FOUND",  # repo, revision or file does not exist
        "OFFLINE",  # cannot reach the Hub, or offline mode is on
        "DISK_FULL",  # not enough free space (checked before, or hit while writing)
        "CHECKSUM_MISMATCH",  # bytes do not match the Hub's hash even after a re-download
        "CANCELLED",  # the user cancelled; partial bytes are kept for resume
        "CONFIRM_REQUIRED",  # a destructive call without confirm=True
        "BAD_REQUEST",  # the request itself cannot be served (no such local model ...)
        "HTTP",  # any other Hub answer we cannot act on more precisely
        "TIMEOUT",  # the Hub did not connect, answer or keep sending within its time
        "UNSAFE",  # the Hub's answer names a path outside the cache, or breaks its word
    }
)


class HubError(Exception):
    """A hub failure with `code` (one of HUB_ERROR_CODES) and a `message` for people."""

    def __init__(self, code: str, message: str) -> None:
        if code not in HUB_ERROR_CODES:
            raise ValueError(f"unknown hub error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"HubError({self.code!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, HubError)
            and (self.code, self.message) == (other.code, other.message)
        )

    def __hash__(self) -> int:
        return hash((self.code, self.message))


def human_bytes(n: float) -> str:
    """1.2 GB style sizes (decimal units, like the Hub shows)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@dataclass(frozen=True, slots=True)
class Runnable:
    """Whether a model fits here, with which engine, and why not when it does not."""

    ok: bool
    engine: str | None
    needed_bytes: int
    available_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """A snapshot of one download for progress bars: bytes over the whole plan."""

    repo_id: str
    filename: str
    file_index: int
    file_count: int
    downloaded: int
    total: int
    rate_bps: float
    eta_s: float | None
    state: State
    error: HubError | None = None
    path: str | None = None  # set when done: the GGUF file or the MLX directory
    stalled_s: float | None = None  # seconds with (next to) no data, once worth showing
    unverified: tuple[str, ...] = ()  # files the Hub gave no hash for (set when done)

    @property
    def fraction(self) -> float:
        return self.downloaded / self.total if self.total else 1.0

    @property
    def finished(self) -> bool:
        return self.state in ("done", "error", "cancelled")


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A model on disk and what llmdeck knows about it."""

    id: str  # stable handle: "owner/name:file.gguf", "owner/name", "local:<name>", BUNDLED_ID
    name: str
    path: Path  # the GGUF file or the MLX directory
    format: str  # "gguf" | "mlx"
    engine: str | None  # the engine that would serve it here
    size_bytes: int
    source: str  # "hf-cache" | "models-dir" | "bundled"
    valid: bool
    problem: str | None
    quant: str | None
    role: str
    repo_id: str | None = None
    revision: str | None = None
    mmproj: Path | None = None
    base_model: bool = False  # no chat template: prompted as a transcript (picker says so)
    verified: bool = True  # False: some of its files came with no hash from the Hub to check
    model_id: str = ""  # the one id every surface shows (core.model_ids): `gemma3:270m-q4_k_m`


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One repo in a search: what the results table shows and whether it runs here."""

    repo_id: str
    format: str  # "mlx" | "gguf"
    downloads: int
    likes: int
    last_modified: datetime | None
    size_bytes: int | None
    quant: str | None
    architecture: str | None
    license: str | None
    gated: bool
    role: str
    runnable: Runnable


@dataclass(frozen=True, slots=True)
class RepoFileInfo:
    """One file of a repo, as the file list shows it."""

    path: str
    size: int
    sha256: str | None  # LFS files: the content hash the Hub checks against
    quant: str | None
    role: str | None  # chat | embedding | vision | projector for model files, else None
    mmproj: str | None  # the projector offered together with this GGUF model file
    blob_id: str | None = None  # the git blob sha1, checked for files outside LFS
    unsafe: str | None = None  # why the name cannot be written under the cache, if so


@dataclass(frozen=True, slots=True)
class RepoListing:
    repo_id: str
    revision: str  # the commit the listing describes
    format: str | None  # "mlx" | "gguf" | None (nothing llmdeck runs)
    gated: bool
    pipeline_tag: str | None
    model_type: str | None
    files: tuple[RepoFileInfo, ...]
    ref: str = "main"

    def file(self, path: str) -> RepoFileInfo:
        for f in self.files:
            if f.path == path:
                return f
        raise HubError("NOT_FOUND", f"{self.repo_id} has no file {visible(path)!r}; list its "
                       "files first.")

    @property
    def model_files(self) -> list[RepoFileInfo]:
        """Files a user picks: GGUF models (first shard only) or the MLX weights."""
        if self.format == "gguf":
            return [f for f in self.files if is_gguf(f.path) and not is_mmproj(f.path)
                    and (gguf_shard(f.path) or (1, 1))[0] == 1]
        return [f for f in self.files if f.path.endswith(".safetensors")]


@dataclass(frozen=True, slots=True)
class PlannedFile:
    path: str
    size: int
    sha256: str | None  # LFS content hash
    blob_id: str | None = None  # git blob sha1 (files outside LFS)

    @property
    def expected_hash(self) -> str | None:
        """The hash the bytes must have: sha256 for LFS files, else the git sha1."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True, slots=True)
class DownloadPlan:
    """Exactly what to fetch for one model, at one commit."""

    repo_id: str
    revision: str
    format: str  # "mlx" | "gguf"
    primary: str  # the GGUF file to load, or "" for an MLX directory
    files: tuple[PlannedFile, ...]
    ref: str = "main"  # the branch name the user asked for, recorded under refs/

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One recommended model, in the build chosen for this machine."""

    name: str
    family: str
    good_at: str
    licence: str
    format: str  # "mlx" (a whole repo) | "gguf" (one file of a repo)
    repo: str
    file: str | None  # the GGUF file; None for an MLX repo
    size_bytes: int
    kv_bytes_per_token: int

    @property
    def local_id(self) -> str:
        """The id core.hub.registry gives this model once downloaded."""
        return f"{self.repo}:{self.file}" if self.file else self.repo

    def kv_cache_bytes(self, context: int) -> int:
        return self.kv_bytes_per_token * max(context, 0)

    def needed_bytes(self, context: int) -> int:
        """Model bytes plus its KV cache at `context` tokens."""
        return self.size_bytes + self.kv_cache_bytes(context)


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether a model fits this machine's memory: ok | tight | too_big, and the figures."""

    verdict: str
    needed_bytes: int
    total_bytes: int
    budget_bytes: int = 0  # the pool's memory budget the verdict was judged against


def plan_download(listing: RepoListing, filename: str | None = None,
                  include_mmproj: bool = True) -> DownloadPlan:
    """The files one model needs; a GGUF pick brings its shards and its mmproj."""
    def planned(f: RepoFileInfo) -> PlannedFile:
        if f.unsafe:
            raise HubError("UNSAFE", f"{listing.repo_id} offers a file named "
                           f"{visible(f.path)!r}, which {f.unsafe}; llmdeck will not write it. "
                           "Check HF_ENDPOINT (a mirror or proxy may be hostile).")
        return PlannedFile(f.path, f.size, f.sha256, f.blob_id)

    if listing.format == "mlx":
        chosen = [f for f in listing.files
                  if any(fnmatch.fnmatch(f.path, p) for p in MLX_PATTERNS) and "/" not in f.path]
        return DownloadPlan(listing.repo_id, listing.revision, "mlx", "",
                            tuple(planned(f) for f in chosen), listing.ref)
    if listing.format == "gguf":
        models = listing.model_files
        if filename is None:
            if len(models) != 1:
                names = ", ".join(f.path for f in models)
                raise HubError("BAD_REQUEST", f"{listing.repo_id} has {len(models)} GGUF files; "
                               f"name the one you want: {names}")
            filename = models[0].path
        target = listing.file(filename)
        if is_mmproj(target.path):
            raise HubError("BAD_REQUEST", f"{filename} is a vision projector; pick the model "
                           "file and its projector comes with it.")
        if not is_gguf(target.path):
            raise HubError("BAD_REQUEST", f"{filename} is not a GGUF model file.")
        chosen = [target]
        if shard := gguf_shard(target.path):
            prefix = target.path[: -len("-00001-of-00003.gguf")]
            chosen = [f for f in listing.files
                      if f.path.startswith(prefix) and gguf_shard(f.path)
                      and gguf_shard(f.path)[1] == shard[1]]  # type: ignore[index]
        if include_mmproj and target.mmproj:
            chosen.append(listing.file(target.mmproj))
        return DownloadPlan(listing.repo_id, listing.revision, "gguf", target.path,
                            tuple(planned(f) for f in chosen), listing.ref)
    raise HubError("BAD_REQUEST", f"{listing.repo_id} has neither GGUF files nor an MLX model "
                   "(config.json + safetensors); llmdeck cannot run it.")
