"""Search and file listings through the real huggingface_hub client against the fake Hub."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi

from core.hub import HubError, list_files, plan_download, search_models
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    EMBED_REPO,
    GGUF_REPO,
    MLX_REPO,
    VISION_REPO,
    catalog_files_fixture,
    fake_hub_fixture,
)
from tests.fakes.hub_server import FakeHub


def test_gguf_search_sorted_by_downloads(fake_hub: FakeHub) -> None:
    results = search_models("tiny", fmt="gguf", sort="downloads")
    assert [r.repo_id for r in results] == [GGUF_REPO, VISION_REPO, EMBED_REPO]
    first = results[0]
    assert first.format == "gguf"
    assert first.quant == "Q4_K_M,Q8_0"
    assert first.architecture == "llama"
    assert first.license == "apache-2.0"
    assert first.size_bytes and first.size_bytes > 3_000_000
    assert first.runnable.reason
    # the request the real client made carried the library filter and the sort
    api_calls = [p for m, p, _ in fake_hub.requests if p == "/api/models"]
    assert api_calls


def test_sort_by_likes_and_by_recency(fake_hub: FakeHub) -> None:
    by_likes = search_models("tiny", fmt="all", sort="likes")
    assert by_likes[0].repo_id == VISION_REPO
    recent = search_models("", fmt="all", sort="recent")
    assert recent[0].repo_id == VISION_REPO and recent[1].repo_id == MLX_REPO


def test_mlx_search_reads_quant_from_name_and_arch_from_config(fake_hub: FakeHub) -> None:
    [result] = search_models("tiny", fmt="mlx")
    assert result.repo_id == MLX_REPO
    assert (result.format, result.quant, result.architecture) == ("mlx", "4bit", "llama")
    assert result.license == "mit"


def test_gated_and_roles_show_in_results(fake_hub: FakeHub) -> None:
    results = {r.repo_id: r for r in search_models("", fmt="gguf")}
    assert results["bigco/Gated-Model-GGUF"].gated is True
    assert results[GGUF_REPO].gated is False
    assert results[VISION_REPO].role == "vision"
    assert results[EMBED_REPO].role == "embedding"


def test_limit_is_respected(fake_hub: FakeHub) -> None:
    assert len(search_models("", fmt="gguf", limit=2)) == 2


def test_bad_sort_is_a_value_error_with_a_code(fake_hub: FakeHub) -> None:
    with pytest.raises(HubError) as err:
        search_models("x", sort="stars")  # type: ignore[arg-type]
    assert err.value.code == "BAD_REQUEST"


def test_listing_has_sizes_quants_roles_and_paired_mmproj(fake_hub: FakeHub) -> None:
    listing = list_files(VISION_REPO)
    model = listing.file("tiny-vl-Q4_K_M.gguf")
    proj = listing.file("mmproj-tiny-vl-f16.gguf")
    assert listing.format == "gguf"
    assert model.size == fake_hub.repos[VISION_REPO].files[model.path].size
    assert (model.quant, model.role, model.mmproj) == ("Q4_K_M", "vision", proj.path)
    assert (proj.quant, proj.role) == ("fp16", "projector")
    assert model.sha256 == fake_hub.repos[VISION_REPO].files[model.path].sha256
    plan = plan_download(listing)
    assert [f.path for f in plan.files] == [model.path, proj.path]


def test_multi_quant_repo_needs_a_file_choice(fake_hub: FakeHub) -> None:
    listing = list_files(GGUF_REPO)
    with pytest.raises(HubError) as err:
        plan_download(listing)
    assert err.value.code == "BAD_REQUEST" and "tiny-chat-Q8_0.gguf" in err.value.message
    plan = plan_download(listing, "tiny-chat-Q8_0.gguf")
    assert [f.path for f in plan.files] == ["tiny-chat-Q8_0.gguf"]


def test_mlx_plan_takes_only_what_mlx_lm_reads(fake_hub: FakeHub) -> None:
    plan = plan_download(list_files(MLX_REPO))
    assert plan.format == "mlx"
    assert {f.path for f in plan.files} == {"config.json", "tokenizer.json",
                                            "tokenizer_config.json", "model.safetensors"}


def test_missing_repo_is_not_found(fake_hub: FakeHub) -> None:
    with pytest.raises(HubError) as err:
        list_files("nobody/nothing-here")
    assert err.value.code == "NOT_FOUND" and "nobody/nothing-here" in err.value.message


def test_unreachable_hub_is_offline(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = fake_hub.endpoint
    fake_hub.stop()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(HubError) as err:
        search_models("tiny")
    assert err.value.code == "OFFLINE" and endpoint in err.value.message


def test_a_proxy_page_instead_of_the_hub_says_so(fake_hub: FakeHub) -> None:
    """A captive portal answers 200 with HTML: it was 'JSONDecodeError while talking to the
    Hub about .'."""
    fake_hub.proxy_page = b"<html><body>Sign in to the guest network</body></html>"
    for call, what in ((lambda: search_models("tiny"), "the search"),
                       (lambda: list_files(GGUF_REPO), GGUF_REPO)):
        with pytest.raises(HubError) as err:
            call()
        message = err.value.message
        assert fake_hub.endpoint in message and what in message and "proxy" in message


def test_offline_mode_is_reported_as_such(fake_hub: FakeHub,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError) as err:
        list_files(GGUF_REPO)
    assert err.value.code == "OFFLINE" and "HF_HUB_OFFLINE" in err.value.message


def test_fake_tree_endpoint_answers_the_real_client(fake_hub: FakeHub) -> None:
    api = HfApi(endpoint=fake_hub.endpoint, token=False)
    entries = {e.path: e for e in api.list_repo_tree(GGUF_REPO, recursive=True)}
    q4 = fake_hub.repos[GGUF_REPO].files["tiny-chat-Q4_K_M.gguf"]
    assert entries[q4.path].size == q4.size
    assert entries[q4.path].lfs.sha256 == q4.sha256
