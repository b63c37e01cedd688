"""Downloads through the real huggingface_hub client: progress, cancel, resume, failures."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download

from core import paths
from core.hub import (
    CancelToken,
    DownloadJob,
    DownloadProgress,
    find_model,
    list_files,
    list_local_models,
    plan_download,
    pull,
)
from core.hub import cache_layout as layout
from core.hub.auth import RedactTokens, redact
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GATED_REPO,
    GGUF_REPO,
    MLX_REPO,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import _SERVE_SLICE, FakeHub

Q4 = "tiny-chat-Q4_K_M.gguf"


def _settled(read, quiet_s: float = 0.5, limit_s: float = 15.0) -> int:
    """A counter's value once it has not changed for `quiet_s`."""
    import time

    value, since, deadline = read(), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.05)
        if (now := read()) != value:
            value, since = now, time.monotonic()
    return value


def _ids() -> set[str]:
    return {m.id for m in list_local_models(include_bundled=False)}


def test_pull_gguf_lands_in_the_hf_cache_readable_by_huggingface_hub(fake_hub: FakeHub) -> None:
    events: list[DownloadProgress] = []
    result = pull(GGUF_REPO, Q4, on_progress=events.append)
    assert result.ok, result.error
    size = fake_hub.repos[GGUF_REPO].files[Q4].size
    assert result.path is not None and result.path.stat().st_size == size
    assert result.path.is_relative_to(paths.hf_cache_dir())
    # huggingface_hub itself finds the file in the cache without the network
    again = hf_hub_download(GGUF_REPO, Q4, cache_dir=str(paths.hf_cache_dir()),
                            local_files_only=True)
    assert Path(again).resolve() == result.path.resolve()
    # progress: monotone bytes, a rate, ending in done with the path
    downloading = [e for e in events if e.state == "downloading"]
    assert downloading, "no progress events while downloading"
    assert all(a.downloaded <= b.downloaded for a, b in zip(events, events[1:], strict=False))
    assert events[-1].state == "done" and events[-1].downloaded == size == events[-1].total
    assert events[-1].path == str(result.path)
    assert f"{GGUF_REPO}:{Q4}" in _ids()
    assert fake_hub.served(GGUF_REPO, Q4) == size


def test_second_pull_fetches_nothing(fake_hub: FakeHub) -> None:
    assert pull(GGUF_REPO, Q4).ok
    before = fake_hub.served(GGUF_REPO, Q4)
    result = pull(GGUF_REPO, Q4)
    assert result.ok and result.bytes_fetched == 0
    assert fake_hub.served(GGUF_REPO, Q4) == before


def test_vision_gguf_comes_with_its_projector(fake_hub: FakeHub) -> None:
    result = pull(VISION_REPO)
    assert result.ok
    [model] = [m for m in list_local_models(include_bundled=False) if m.repo_id == VISION_REPO]
    assert model.role == "vision" and model.mmproj is not None and model.mmproj.exists()
    assert model.mmproj.name == "mmproj-tiny-vl-f16.gguf" and model.valid


def test_mlx_repo_pull_gives_a_valid_model_directory(fake_hub: FakeHub) -> None:
    result = pull(MLX_REPO)
    assert result.ok and result.path is not None and result.path.is_dir()
    assert not (result.path / "README.md").exists()
    [model] = [m for m in list_local_models(include_bundled=False) if m.repo_id == MLX_REPO]
    assert (model.format, model.valid, model.quant) == ("mlx", True, "4bit")


async def test_async_job_streams_progress_without_blocking_the_loop(fake_hub: FakeHub) -> None:
    fake_hub.throttle_bps = 6 * 1024 * 1024  # about half a second for the 3 MB file
    plan = plan_download(list_files(GGUF_REPO), Q4)
    job = DownloadJob(plan)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    states = [p.state async for p in job]
    tick_task.cancel()
    result = await job.wait()
    assert result.ok
    assert states[0] == "queued" and states[-1] == "done" and "downloading" in states
    assert ticks > 10, "the event loop stalled during the download"


async def test_cancel_keeps_the_partial_and_the_next_pull_resumes(fake_hub: FakeHub) -> None:
    size = fake_hub.repos[GGUF_REPO].files[Q4].size
    fake_hub.throttle_bps = 2 * 1024 * 1024
    plan = plan_download(list_files(GGUF_REPO), Q4)
    job = DownloadJob(plan)
    async for progress in job:
        if progress.downloaded >= 512 * 1024 and not progress.finished:
            job.cancel()
        if progress.finished:
            break
    result = await job.wait()
    assert result.error is not None and result.error.code == "CANCELLED"
    assert "resume" in result.error.message
    partial = layout.partial_path(paths.hf_cache_dir(), GGUF_REPO, plan.files[0].sha256 or "")
    kept = partial.stat().st_size
    assert 0 < kept < size
    assert f"{GGUF_REPO}:{Q4}" not in _ids()  # a partial is never a model

    fake_hub.throttle_bps = None
    # The cancelled GET's server thread may still be asleep in its throttle and count one
    # more slice before its write fails: read the count once it has stopped moving.
    served_before = _settled(lambda: fake_hub.served(GGUF_REPO, Q4))
    resumed = pull(GGUF_REPO, Q4)
    assert resumed.ok
    assert resumed.bytes_fetched == size - kept
    assert fake_hub.served(GGUF_REPO, Q4) - served_before == size - kept
    assert any(r and r.startswith(f"bytes={kept}-") for _, _, r in fake_hub.requests)
    assert not partial.exists()


def test_cancel_token_before_start_fetches_nothing(fake_hub: FakeHub) -> None:
    cancel = CancelToken()
    cancel.cancel()
    result = pull(GGUF_REPO, Q4, cancel=cancel)
    assert result.error is not None and result.error.code == "CANCELLED"
    assert fake_hub.served(GGUF_REPO, Q4) == 0


def test_corrupt_bytes_are_downloaded_again(fake_hub: FakeHub) -> None:
    size = fake_hub.repos[GGUF_REPO].files[Q4].size
    fake_hub.corrupt_file(GGUF_REPO, Q4, times=1)
    result = pull(GGUF_REPO, Q4)
    assert result.ok
    assert fake_hub.served(GGUF_REPO, Q4) == 2 * size
    [model] = [m for m in list_local_models(include_bundled=False) if m.name == Q4]
    assert model.valid
    digest = fake_hub.repos[GGUF_REPO].files[Q4].sha256
    assert layout.blob_path(paths.hf_cache_dir(), GGUF_REPO, digest).exists()


def test_persistent_corruption_is_an_error_and_never_a_model(fake_hub: FakeHub) -> None:
    fake_hub.corrupt_file(GGUF_REPO, Q4, times=99)
    result = pull(GGUF_REPO, Q4)
    assert result.error is not None and result.error.code == "CHECKSUM_MISMATCH"
    assert "nothing was kept" in result.error.message
    assert f"{GGUF_REPO}:{Q4}" not in _ids()
    repo = layout.repo_dir(paths.hf_cache_dir(), GGUF_REPO)
    assert not list((repo / "blobs").glob("*")), "corrupt bytes were left in the cache"


def test_small_non_lfs_files_are_checked_by_git_blob_id(fake_hub: FakeHub) -> None:
    fake_hub.corrupt_file(MLX_REPO, "config.json", times=99)
    result = pull(MLX_REPO)
    assert result.error is not None and result.error.code == "CHECKSUM_MISMATCH"
    assert not any(m.repo_id == MLX_REPO for m in list_local_models(include_bundled=False))


def test_gated_repo_without_token_says_where_to_accept(fake_hub: FakeHub) -> None:
    result = pull(GATED_REPO)
    assert result.error is not None and result.error.code == "GATED"
    assert f"{fake_hub.endpoint}/{GATED_REPO}" in result.error.message
    assert "HF_TOKEN" in result.error.message


def test_gated_repo_with_an_unapproved_token_is_403(fake_hub: FakeHub,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_notgrantedtoken0000")
    result = pull(GATED_REPO)
    assert result.error is not None and result.error.code == "GATED"
    assert "accept the terms" in result.error.message


def test_gated_repo_downloads_once_access_is_granted(fake_hub: FakeHub,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_grantedtoken1234567890"
    fake_hub.grant(GATED_REPO, token)
    monkeypatch.setenv("HF_TOKEN", token)
    assert pull(GATED_REPO).ok
    # the token went to the Hub only, never to the CDN origin that served the LFS bytes
    assert f"Bearer {token}" in fake_hub.auth_headers_seen
    assert fake_hub.served(GATED_REPO, "gated-Q4_0.gguf") > 0
    assert fake_hub.cdn_auth_headers_seen == []


def test_token_never_reaches_the_logs(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    token = "hf_secretSECRETsecret42"
    fake_hub.grant(GATED_REPO, token)
    monkeypatch.setenv("HF_TOKEN", token)
    caplog.set_level(logging.DEBUG)
    assert pull(GATED_REPO).ok
    fake_hub.corrupt_file(GGUF_REPO, Q4, times=99)
    assert not pull(GGUF_REPO, Q4).ok  # the failure path logs too
    assert caplog.records, "expected debug logging to be captured"
    assert token not in caplog.text


def test_missing_repo_and_missing_file(fake_hub: FakeHub) -> None:
    missing = pull("nobody/no-such-model")
    assert missing.error is not None and missing.error.code == "NOT_FOUND"
    assert "nobody/no-such-model" in missing.error.message
    no_file = pull(GGUF_REPO, "tiny-chat-Q2_K.gguf")
    assert no_file.error is not None and no_file.error.code == "NOT_FOUND"


def test_a_dropped_connection_resumes_within_the_same_pull(fake_hub: FakeHub) -> None:
    size = fake_hub.repos[GGUF_REPO].files[Q4].size
    fake_hub.drop_connection(GGUF_REPO, Q4, after_bytes=1024 * 1024, times=2)
    result = pull(GGUF_REPO, Q4)
    assert result.ok, result.error
    ranged = [r for _, p, r in fake_hub.requests if p.startswith("/__lfs__/") and r]
    assert len(ranged) == 2  # two hang-ups, two Range requests picking up from the partial
    assert fake_hub.served(GGUF_REPO, Q4) <= size + 2 * _SERVE_SLICE
    assert find_model(f"{GGUF_REPO}:{Q4}").valid


def test_log_filter_masks_tokens() -> None:
    record = logging.LogRecord("huggingface_hub.x", logging.INFO, __file__, 1,
                               "Authorization: Bearer %s", ("hf_abcdefghijklmnop",), None)
    RedactTokens().filter(record)
    assert "hf_abcdefghijklmnop" not in record.getMessage()
    assert redact("token=hf_ZZZZZZZZZZZZ and x", None) == "token=hf_*** and x"


def test_a_link_that_keeps_dying_is_offline_and_keeps_the_partial(fake_hub: FakeHub) -> None:
    fake_hub.drop_connection(GGUF_REPO, Q4, after_bytes=256 * 1024, times=10)
    result = pull(GGUF_REPO, Q4)
    assert result.error is not None and result.error.code == "OFFLINE"
    assert "resume" in result.error.message
    sha = fake_hub.repos[GGUF_REPO].files[Q4].sha256
    assert layout.partial_path(paths.hf_cache_dir(), GGUF_REPO, sha).stat().st_size > 0
    fake_hub.drop_connection(GGUF_REPO, Q4, after_bytes=0, times=0)  # the link is back
    kept = layout.partial_path(paths.hf_cache_dir(), GGUF_REPO, sha).stat().st_size
    again = pull(GGUF_REPO, Q4)
    assert again.ok and again.bytes_fetched == fake_hub.repos[GGUF_REPO].files[Q4].size - kept


def test_token_stored_by_hf_auth_login_is_used(fake_hub: FakeHub) -> None:
    from huggingface_hub import constants

    token = "hf_storedbyloginABCDEFG"
    fake_hub.grant(GATED_REPO, token)
    stored = Path(constants.HF_TOKEN_PATH)  # inside this test's LLMDECK_HOME (see fixture)
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(token)
    assert pull(GATED_REPO).ok
    assert f"Bearer {token}" in fake_hub.auth_headers_seen
