"""The local registry: what is on disk, whether it is whole, and deleting with confirm."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import paths
from core.hub import HubError, delete_model, ensure_bundled, find_model, list_local_models, pull
from core.hub import cache_layout as layout
from core.hub.registry import BUNDLED_ID
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    GGUF_REPO,
    MLX_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
    make_gguf,
)
from tests.fakes.hub_server import FakeHub

Q4, Q8 = "tiny-chat-Q4_K_M.gguf", "tiny-chat-Q8_0.gguf"


def test_delete_needs_confirm_and_keeps_blobs_other_files_use(fake_hub: FakeHub) -> None:
    assert pull(GGUF_REPO, Q4).ok and pull(GGUF_REPO, Q8).ok
    q4 = find_model(f"{GGUF_REPO}:{Q4}")
    with pytest.raises(HubError) as err:
        delete_model(q4, confirm=False)
    assert err.value.code == "CONFIRM_REQUIRED"
    assert q4.path.exists()

    freed = delete_model(q4, confirm=True)
    assert freed == fake_hub.repos[GGUF_REPO].files[Q4].size
    ids = {m.id for m in list_local_models(include_bundled=False)}
    assert ids == {f"{GGUF_REPO}:{Q8}"}
    assert find_model(f"{GGUF_REPO}:{Q8}").valid

    delete_model(find_model(Q8), confirm=True)  # by unique name
    assert not layout.repo_dir(paths.hf_cache_dir(), GGUF_REPO).exists()


def test_mlx_model_delete_removes_the_snapshot(fake_hub: FakeHub) -> None:
    assert pull(MLX_REPO).ok
    model = find_model(MLX_REPO)
    assert model.format == "mlx" and model.valid
    delete_model(model, confirm=True)
    assert not any(m.repo_id == MLX_REPO for m in list_local_models())


def test_a_blob_removed_behind_our_back_is_not_listed(fake_hub: FakeHub) -> None:
    assert pull(GGUF_REPO, Q8).ok
    sha = fake_hub.repos[GGUF_REPO].files[Q8].sha256
    layout.blob_path(paths.hf_cache_dir(), GGUF_REPO, sha).unlink()
    assert not any(m.name == Q8 for m in list_local_models(include_bundled=False))


def test_models_folder_entries_and_their_delete(llmdeck_home: Path) -> None:
    path = make_gguf(paths.models_dir() / "own" / "own-Q4_0.gguf", 2048)
    model = find_model("local:own/own-Q4_0.gguf")
    assert (model.source, model.valid, model.quant, model.path) == ("models-dir", True, "Q4_0", path)
    size = path.stat().st_size
    assert delete_model(model, confirm=True) == size
    assert not path.exists()


def test_bundled_default_is_listed_and_cannot_be_deleted(llmdeck_home: Path) -> None:
    bundled = find_model(BUNDLED_ID)
    assert (bundled.format, bundled.source, bundled.role, bundled.valid) == (
        "gguf", "bundled", "chat", True)
    assert bundled.size_bytes > 200_000_000
    with pytest.raises(HubError) as err:
        delete_model(bundled, confirm=True)
    assert err.value.code == "BAD_REQUEST"


def test_ensure_bundled_joins_the_chunks_once(llmdeck_home: Path) -> None:
    path = ensure_bundled()
    assert path.is_file() and path.parent == paths.models_dir()
    listed = find_model(BUNDLED_ID)
    assert listed.path == path and listed.size_bytes == path.stat().st_size and listed.valid
    # the joined file is the bundled model, not a second "local:" entry
    assert not any(m.source == "models-dir" for m in list_local_models())
    mtime = path.stat().st_mtime_ns
    assert ensure_bundled() == path and path.stat().st_mtime_ns == mtime
