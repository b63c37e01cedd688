"""The rules every name from a Hub answer passes before it becomes a path in the cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.hub import cache_layout as layout
from core.hub.errors import HubError
from core.hub.safe_names import (
    check_commit,
    check_etag,
    check_repo_id,
    check_revision,
    inside,
    path_problem,
)

COMMIT = "a" * 40
SHA256 = "b" * 64


@pytest.mark.parametrize("name", [
    "model.gguf", "sub/dir/model-Q4_K_M.gguf", "weird name (1).gguf", "ünïcode.json",
    "..hidden-ish.gguf", "a..b.gguf", "a:b.gguf",
])
def test_plain_relative_names_pass(name: str) -> None:
    assert path_problem(name) is None


@pytest.mark.parametrize("name, why", [
    ("", "empty"), ("../x.gguf", "'..'"), ("a/../../x", "'..'"), ("a/./b", "'.'"),
    ("a//b", "empty"), ("a/", "empty"), ("/etc/passwd", "absolute"), ("C:/x", "absolute"),
    ("a\\..\\b", "backslash"), ("a\0b", "control"), ("a\x1b]0;t\x07", "control"),
    ("a\x9bb", "control"), ("x" * 2000, "too long"), ("a/" + "y" * 300, "too long"),
])
def test_unsafe_names_say_why(name: str, why: str) -> None:
    problem = path_problem(name)
    assert problem is not None and why in problem


@pytest.mark.parametrize("value, check", [
    ("../../x", check_commit), (COMMIT.upper(), check_commit), (COMMIT[:-1], check_commit),
    ("../../blob", check_etag), ("abc", check_etag), (SHA256 + "/", check_etag),
    ("a/b/c", check_repo_id), ("../x", check_repo_id), ("a--b/c", check_repo_id),
    ("a/b\x1b", check_repo_id), ("-a/b", check_repo_id), ("/etc", check_revision),
    ("../main", check_revision),
])
def test_shapes_are_enforced_with_an_unsafe_error(value: str, check) -> None:  # noqa: ANN001
    with pytest.raises(HubError) as info:
        check(value)
    assert info.value.code == "UNSAFE"
    assert "\x1b" not in info.value.message  # the Hub's words are shown, never obeyed


def test_good_shapes_pass() -> None:
    assert check_commit(COMMIT) == COMMIT
    assert check_etag(SHA256) == SHA256 and check_etag(COMMIT) == COMMIT
    assert check_repo_id("mlx-community/Qwen3-4B-4bit") and check_repo_id("gpt2")
    assert check_revision("refs/pr/1") == "refs/pr/1"


def test_a_folder_linked_outside_the_cache_is_caught(tmp_path: Path) -> None:
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    snap = layout.snapshot_dir(cache, "acme/m", COMMIT)
    snap.mkdir(parents=True)
    os.symlink(outside, snap / "sub")  # planted by something else, followed by nothing here
    blob = layout.blob_path(cache, "acme/m", SHA256)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x")
    with pytest.raises(HubError) as info:
        layout.link_snapshot(cache, "acme/m", COMMIT, "sub/model.gguf", SHA256)
    assert info.value.code == "UNSAFE"
    assert list(outside.iterdir()) == []
    assert inside(cache, snap / "model.gguf") == snap / "model.gguf"


def test_every_layout_path_checks_its_part(tmp_path: Path) -> None:
    tmp_path = tmp_path / "cache"
    tmp_path.mkdir()
    for call in (lambda: layout.blob_path(tmp_path, "acme/m", "../x"),
                 lambda: layout.partial_path(tmp_path, "acme/m", "../x"),
                 lambda: layout.lock_path(tmp_path, "acme/m", "../x"),
                 lambda: layout.snapshot_dir(tmp_path, "acme/m", "../x"),
                 lambda: layout.repo_dir(tmp_path, "../../x"),
                 lambda: layout.write_ref(tmp_path, "acme/m", "../../x", COMMIT),
                 lambda: layout.link_snapshot(tmp_path, "acme/m", COMMIT, "/abs", SHA256)):
        with pytest.raises(HubError):
            call()
    assert list(tmp_path.iterdir()) == []
