"""A repo's files with sizes and labels, and the set of files a download needs.

An MLX model is a whole directory (config, tokenizer, safetensors); a GGUF repo holds many
quantisations of which the user wants one, plus its mmproj when the model sees images.
`plan_download` turns a choice into the exact files to fetch, so neither the CLI nor the
TUI ever downloads a whole multi-quant GGUF repo by accident.

The listing is the Hub's word, read as data: the repo must be the one asked for, its
commit 40 hex digits, hashes of the right shape (else unknown, not trusted). A file name
that is no safe relative path stays in the listing, marked `unsafe` with the reason, so
`models files` can show it; planning a download that needs it is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import quote

from core.hub.bounded_http import get_json
from core.hub.client import ensure_reachable
from core.hub.endpoint import endpoint
from core.hub.errors import HubError, classify
from core.hub.filenames import suggested_role
from core.hub.safe_names import (
    COMMIT_RE,
    SHA256_RE,
    check_commit,
    check_repo_id,
    path_problem,
)
from core.model_files import is_gguf, is_mmproj, pair_mmproj, quant_label
from core.terminal_text import visible
from core.wire.hub import (  # noqa: F401  (plan_download: the hub's face hands it out)
    MLX_PATTERNS,
    DownloadPlan,
    PlannedFile,
    RepoFileInfo,
    RepoListing,
    plan_download,
)


def _detect_format(paths: list[str]) -> str | None:
    if any(is_gguf(p) and not is_mmproj(p) for p in paths):
        return "gguf"
    if "config.json" in paths and any(p.endswith(".safetensors") for p in paths):
        return "mlx"
    return None


def list_files(repo_id: str, revision: str | None = None, token: str | None = None) -> RepoListing:
    """The repo's files with sizes, quant labels, roles and mmproj pairing; raises HubError."""
    from huggingface_hub.hf_api import ModelInfo

    check_user_repo_id(repo_id)
    if revision is not None and path_problem(revision):
        raise HubError("BAD_REQUEST", f"{visible(revision)!r} is not a branch, tag or commit "
                       "name.")
    ensure_reachable()
    url = f"{endpoint()}/api/models/{repo_id}"
    if revision:
        url += f"/revision/{quote(revision, safe='')}"
    try:
        data = get_json(url, what=f"the file list of {repo_id}", params={"blobs": True},
                        token=token)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        info = ModelInfo(**data)
    except Exception as exc:
        raise classify(exc, repo_id) from exc
    listing = listing_from_info(info, repo_id)
    if revision and revision != listing.revision:
        listing = replace(listing, ref=revision)
    return listing


def check_user_repo_id(repo_id: str) -> None:
    """A repo id as a person typed it: BAD_REQUEST (not UNSAFE) when it is no owner/name."""
    try:
        check_repo_id(repo_id)
    except HubError:
        raise HubError("BAD_REQUEST", f"{visible(str(repo_id))!r} is not a valid repo id; "
                       "use owner/name.") from None


def _hex(value: Any, shape: Any) -> str | None:
    return value if isinstance(value, str) and shape.fullmatch(value) else None


def _size(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def listing_from_info(info: Any, asked: str | None = None) -> RepoListing:
    """A RepoListing from huggingface_hub's ModelInfo, checked (UNSAFE when it lies)."""
    repo_id = check_repo_id(info.id)
    if asked is not None and repo_id.lower() != asked.lower():
        raise HubError("UNSAFE", f"llmdeck asked the Hub for {visible(asked)} and got "
                       f"{visible(repo_id)} back; nothing was used. Check HF_ENDPOINT.")
    check_commit(info.sha)
    siblings = [s for s in (info.siblings or []) if isinstance(s.rfilename, str)]
    paths = [s.rfilename for s in siblings]
    fmt = _detect_format(paths)
    mmprojs = [p for p in paths if is_mmproj(p) and not path_problem(p)]
    config = info.config or {}
    files = []
    for s in siblings:
        path = s.rfilename
        unsafe = path_problem(path)
        lfs = s.lfs
        sha256 = _hex(getattr(lfs, "sha256", None), SHA256_RE) if lfs else None
        blob_id = None if lfs else _hex(getattr(s, "blob_id", None), COMMIT_RE)
        size = _size(s.size) or (_size(getattr(lfs, "size", None)) if lfs else 0)
        if unsafe:
            role, paired = None, None
        elif is_gguf(path):
            role = suggested_role(info.id, path, info.pipeline_tag, has_mmproj=bool(mmprojs))
            paired = None if is_mmproj(path) else pair_mmproj(path, mmprojs)
        elif path.endswith(".safetensors") and fmt == "mlx":
            role = suggested_role(info.id, path, info.pipeline_tag)
            paired = None
        else:
            role, paired = None, None
        files.append(RepoFileInfo(
            path=path, size=size, sha256=sha256,
            quant=quant_label(path) if role else None,
            role=role, mmproj=paired, blob_id=blob_id, unsafe=unsafe,
        ))
    config = config if isinstance(config, dict) else {}
    return RepoListing(
        repo_id=repo_id,
        revision=info.sha,
        format=fmt,
        gated=bool(info.gated),
        pipeline_tag=info.pipeline_tag,
        model_type=config.get("model_type"),
        files=tuple(files),
    )


