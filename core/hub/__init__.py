"""Hugging Face hub: search, file listings, verified resumable downloads, local registry.

The public surface the Runtime and the TUI use; everything talks to the Hub through
huggingface_hub and reports failures as HubError values (see errors.py).
"""

from typing import Any

from core.hub.download import (
    CancelToken,
    DownloadProgress,
    DownloadResult,
    download_plan,
    pull,
)
from core.hub.download_job import DownloadJob
from core.hub.errors import HUB_ERROR_CODES, HubError
from core.hub.listing import DownloadPlan, RepoFileInfo, RepoListing, list_files, plan_download
from core.hub.queue import DownloadQueue
from core.hub.recommended import Fit, Recommendation, fit, load_recommended, machine_format
from core.hub.registry import (
    LocalModel,
    delete_model,
    ensure_bundled,
    find_model,
    list_local_models,
)
from core.hub.runnable import Runnable, check_runnable, human_bytes
from core.hub.search import SearchResult, search_models

__all__ = [
    "HUB_ERROR_CODES",
    "CancelToken",
    "DownloadJob",
    "DownloadPlan",
    "DownloadProgress",
    "DownloadQueue",
    "DownloadResult",
    "Fit",
    "HubError",
    "LocalModel",
    "Recommendation",
    "RepoFileInfo",
    "RepoListing",
    "Runnable",
    "SearchResult",
    "check_runnable",
    "delete_model",
    "download_plan",
    "ensure_bundled",
    "find_model",
    "fit",
    "human_bytes",
    "list_files",
    "list_local_models",
    "load_recommended",
    "machine_format",
    "plan_download",
    "pull",
    "search_models",
]


def __getattr__(name: str) -> Any:
    if name == "hub_cli_main":  # `llmdeck models`, loaded only when asked (PEP 562)
        from core.hub.cli import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
