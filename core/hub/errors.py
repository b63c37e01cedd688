"""Hub errors as values: a code the UI can branch on and a sentence a person can act on.

Every failure of search, listing, download or delete becomes a `HubError`; callers never
see huggingface_hub's or httpx's exception types. `classify` does that mapping in one
place so the CLI and the TUI say the same thing for the same cause.
"""

from __future__ import annotations

import errno

from core.hub.endpoint import OFFLINE_SENTENCE, endpoint
from core.wire.hub import HUB_ERROR_CODES, HubError  # noqa: F401  (the hub's names)


def classify(exc: BaseException, repo_id: str = "", filename: str = "") -> HubError:
    """Turn any exception raised while talking to the Hub into a HubError."""
    if isinstance(exc, HubError):
        return exc
    import httpx2
    from huggingface_hub import errors as hf

    what = f"{repo_id}/{filename}" if filename else (repo_id or "the search")
    web = f"{endpoint()}/{repo_id}" if repo_id else endpoint()
    if isinstance(exc, hf.HFValidationError):
        return HubError("BAD_REQUEST", f"{repo_id!r} is not a valid repo id; use owner/name.")
    if isinstance(exc, hf.GatedRepoError):
        status = exc.response.status_code if exc.response is not None else 0
        if status == 401:
            return HubError(
                "GATED",
                f"{repo_id} is gated: accept its terms at {web} while logged in, then set "
                "HF_TOKEN or run `hf auth login` so llmdeck can use your token.",
            )
        return HubError(
            "GATED",
            f"{repo_id} is gated and your token has no access yet: open {web}, accept the "
            "terms (some repos need the owner's approval), then try again.",
        )
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubError("NOT_FOUND", f"{repo_id} has no such revision; check the branch or commit.")
    if isinstance(exc, hf.EntryNotFoundError | hf.RemoteEntryNotFoundError):
        return HubError("NOT_FOUND", f"{what} does not exist in the repo; list its files first.")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return HubError(
            "NOT_FOUND",
            f"No model repo named {repo_id} on {endpoint()}; check the spelling "
            "(owner/name). Private repos need a token with access.",
        )
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return HubError("OFFLINE", OFFLINE_SENTENCE)
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        if status in (401, 403):
            return HubError(
                "AUTH",
                f"The Hub refused access to {what} ({status}); check HF_TOKEN or "
                "`hf auth login`.",
            )
        return HubError("HTTP", f"The Hub answered {status} for {what}; try again later.")
    if isinstance(exc, httpx2.TransportError | ConnectionError | TimeoutError):
        return HubError(
            "OFFLINE",
            f"Cannot reach {endpoint()} ({type(exc).__name__}); check the network "
            "connection, proxy settings or HF_ENDPOINT.",
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return HubError(
            "DISK_FULL",
            f"The disk filled up while writing {what}; free some space (or point "
            "LLMDECK_HOME / HF_HOME elsewhere) and pull again: it resumes where it stopped.",
        )
    if isinstance(exc, ValueError | TypeError | KeyError | AttributeError):
        # A reply that is not the Hub's JSON: most often a proxy's or captive portal's page.
        return HubError(
            "HTTP",
            f"{endpoint()} did not answer {what} the way the Hub does (its reply was not the "
            "Hub's JSON: a proxy or login page?); check HF_ENDPOINT and your proxy settings.",
        )
    return HubError("HTTP", f"{type(exc).__name__} while talking to the Hub about {what}.")
