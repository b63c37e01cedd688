"""Search the Hub for models llmdeck can run: MLX repos and GGUF repos.

One request per format (the one list_models sends), asking the Hub to expand just the
fields a result row shows, so a search costs one request per format and no per-repo
lookups. It goes through core.hub.bounded_http, not HfApi.list_models, which waits for
ever on a Hub that accepts the request and never answers.
"""

from __future__ import annotations

from typing import Any, Literal

from core.hub.bounded_http import get_json
from core.hub.client import ensure_reachable
from core.hub.endpoint import endpoint
from core.hub.errors import HubError, classify
from core.hub.filenames import suggested_role
from core.hub.runnable import check_runnable
from core.model_files import is_gguf, is_mmproj, quant_label
from core.wire.hub import SearchResult

Format = Literal["mlx", "gguf", "all"]
Sort = Literal["downloads", "likes", "recent"]

_SORTS = {"downloads": "downloads", "likes": "likes", "recent": "lastModified"}
_EXPAND = ["downloads", "likes", "lastModified", "library_name", "tags", "gated", "gguf",
           "config", "usedStorage", "pipeline_tag", "safetensors", "siblings"]
# Q4_K_M averages about 4.85 bits per weight: the size a typical GGUF pick will have.
_GGUF_TYPICAL_BYTES_PER_PARAM = 0.61




def search_models(query: str = "", fmt: Format = "all", sort: Sort = "downloads",
                  limit: int = 20, token: str | None = None) -> list[SearchResult]:
    """Repos matching `query`, best first by `sort`; raises HubError."""
    if sort not in _SORTS:
        raise HubError("BAD_REQUEST", f"sort must be one of {', '.join(_SORTS)} (got {sort!r})")
    if fmt not in ("mlx", "gguf", "all"):
        raise HubError("BAD_REQUEST", f"format must be mlx, gguf or all (got {fmt!r})")
    formats = ["mlx", "gguf"] if fmt == "all" else [fmt]
    from huggingface_hub.hf_api import ModelInfo

    limit = max(1, min(int(limit), 1000))
    ensure_reachable()
    results: list[SearchResult] = []
    try:
        for f in formats:
            params: dict[str, Any] = {"filter": [f], "sort": _SORTS[sort], "limit": limit,
                                      "expand": _EXPAND}
            if query:
                params["search"] = query
            items = get_json(f"{endpoint()}/api/models", what="the search results",
                             params=params, token=token)
            if not isinstance(items, list):
                raise ValueError("not a JSON list")
            for item in items[:limit]:
                if not isinstance(item, dict):
                    raise ValueError("not a JSON object")
                item.setdefault("siblings", None)
                results.append(_to_result(ModelInfo(**item), f))
    except Exception as exc:  # every Hub failure becomes a HubError value
        raise classify(exc) from exc
    key = {
        "downloads": lambda r: r.downloads,
        "likes": lambda r: r.likes,
        "recent": lambda r: r.last_modified.timestamp() if r.last_modified else 0.0,
    }[sort]
    results.sort(key=key, reverse=True)
    return results[:limit]


def _license(tags: list[str] | None) -> str | None:
    for tag in tags or []:
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


def _to_result(info: Any, fmt: str) -> SearchResult:
    config: dict[str, Any] = info.config or {}
    gguf: dict[str, Any] = info.gguf or {}
    name = info.id.split("/")[-1]
    quant = quant_label(name)
    if fmt == "gguf" and info.siblings:  # a GGUF repo usually offers several quants
        labels = {quant_label(s.rfilename) for s in info.siblings
                  if is_gguf(s.rfilename) and not is_mmproj(s.rfilename)}
        labels.discard(None)
        quant = ",".join(sorted(labels)) or quant  # type: ignore[arg-type]
    if fmt == "mlx" and quant is None:
        bits = (config.get("quantization") or {}).get("bits")
        quant = f"{bits}bit" if bits else None
    archs = config.get("architectures") or []
    architecture = gguf.get("architecture") or config.get("model_type") or (
        archs[0] if archs else None
    )
    size = info.used_storage
    if fmt == "gguf":
        params = gguf.get("total")
        weights = int(params * _GGUF_TYPICAL_BYTES_PER_PARAM) if params else None
    else:
        weights = size
    runnable = check_runnable(fmt, weights, gguf.get("architecture") if fmt == "gguf"
                              else config.get("model_type"))
    return SearchResult(
        repo_id=info.id,
        format=fmt,
        downloads=info.downloads or 0,
        likes=info.likes or 0,
        last_modified=info.last_modified,
        size_bytes=size,
        quant=quant,
        architecture=architecture,
        license=_license(info.tags),
        gated=bool(info.gated),
        role=suggested_role(info.id, pipeline_tag=info.pipeline_tag),
        runnable=runnable,
    )
