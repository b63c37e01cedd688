"""A hostile Hub on loopback (a mirror, a proxy or a man in the middle can answer so):
every attack goes through the real door (`pull`, `search_models`, `llmdeck models ...`)
and its effect is checked from outside: no file outside the cache (the whole tmp tree is
walked), bytes written and time taken bounded, a sentence naming what went wrong, and no
escape byte on the terminal."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import paths
from core.hub import HubError, list_files, list_local_models, pull, search_models
from core.model_catalog import id_for_path
from tests.fakes.hub_repos import (  # noqa: F401  (fixtures)
    MLX_REPO,
    PYTHON,
    catalog_files_fixture,
    fake_hub_fixture,
    make_gguf,
    mlx_repo_files,
    subprocess_env,
)
from tests.fakes.hub_server import FakeHub

EVIL = "evil/Tiny-GGUF"
SMALL = 4100  # a small file served inline (below the fake's LFS threshold)
ESC_BYTES = ("\x1b", "\x07", "\x9b")


@pytest.fixture(autouse=True)
def fast_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small bounds so a hang is answered in about a second."""
    for name, value in (("LLMDECK_HUB_CONNECT_TIMEOUT", "1"),
                        ("LLMDECK_HUB_FIRST_BYTE_TIMEOUT", "0.5"),
                        ("LLMDECK_HUB_STALL_TIMEOUT", "0.5"),
                        ("LLMDECK_HUB_RETRIES", "1"), ("LLMDECK_HUB_BACKOFF", "0.05")):
        monkeypatch.setenv(name, value)


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.fixture(name="outside")
def outside_fixture(tmp_path: Path) -> Iterator[Path]:
    """A folder beside the cache that a traversal would reach; after the test, every path
    created anywhere under tmp_path must be inside the HF cache."""
    target = tmp_path / "outside"
    target.mkdir()
    before = _tree(tmp_path)
    yield target
    cache = paths.hf_cache_dir()
    home = Path(os.environ["LLMDECK_HOME"])  # llmdeck's own folders (the cache is in it)
    stray = [p for p in _tree(tmp_path) - before
             if not p.is_relative_to(tmp_path / "src")  # the fake's source files
             and not (p.is_relative_to(home) and p.resolve().is_relative_to(home.resolve()))]
    assert not stray, f"written outside the cache: {stray}"
    assert all(p.resolve().is_relative_to(cache.resolve()) for p in cache.rglob("*")
               if p.is_symlink())
    assert not any(target.iterdir()), list(target.iterdir())


def _evil_repo(hub: FakeHub, tmp_path: Path, big: bool = False, **meta) -> str:
    """A one-file GGUF repo; `big` serves it like an LFS file (sha256 etag, CDN redirect)."""
    size = 64 * 1024 if big else SMALL
    data = make_gguf(tmp_path / "src" / "tiny-Q4_K_M.gguf", size).read_bytes()
    if not big:
        data = data[:SMALL]  # inline (git sha1 etag); a valid header is all we need
    hub.add_repo(EVIL, {"tiny-Q4_K_M.gguf": data}, library_name="gguf", tags=["gguf"], **meta)
    return "tiny-Q4_K_M.gguf"


# -- 1. names from the Hub never leave the cache ---------------------------------------------


def test_a_listed_name_with_dotdot_is_refused_before_any_byte(
        fake_hub: FakeHub, tmp_path: Path, outside: Path) -> None:
    name = _evil_repo(fake_hub, tmp_path, listed_as={})
    fake_hub.repos[EVIL].listed_as[name] = "../../../../../../outside/dotdot.gguf"
    fake_hub.serve_unknown = (EVIL, name)  # a server that answers whatever it is asked
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "UNSAFE"
    assert "'..'" in result.error.message and "will not write it" in result.error.message
    assert not [r for r in fake_hub.requests if "/resolve/" in r[1] or "__lfs__" in r[1]]


def test_a_listed_absolute_name_is_refused(fake_hub: FakeHub, tmp_path: Path,
                                           outside: Path) -> None:
    name = _evil_repo(fake_hub, tmp_path)
    fake_hub.repos[EVIL].listed_as[name] = str(outside / "abs.gguf")
    fake_hub.serve_unknown = (EVIL, name)
    result = pull(EVIL, str(outside / "abs.gguf"))
    assert result.error is not None and result.error.code == "UNSAFE"
    assert "absolute" in result.error.message


@pytest.mark.parametrize("big", [False, True], ids=["etag", "x-linked-etag"])
def test_an_etag_that_traverses_is_refused(fake_hub: FakeHub, tmp_path: Path, outside: Path,
                                           big: bool) -> None:
    name = _evil_repo(fake_hub, tmp_path, big=big, no_hashes=True)
    fake_hub.repos[EVIL].etag_as[name] = "../../../../../../outside/blob"
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "UNSAFE"
    assert "neither a sha256 nor a git sha1" in result.error.message


def test_a_commit_header_that_traverses_is_refused(fake_hub: FakeHub, tmp_path: Path,
                                                   outside: Path) -> None:
    _evil_repo(fake_hub, tmp_path, commit_header="../../../../../../outside/snap")
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "UNSAFE"
    assert "40 hex digits" in result.error.message


def test_a_listing_sha_that_traverses_is_refused(fake_hub: FakeHub, tmp_path: Path,
                                                 outside: Path) -> None:
    _evil_repo(fake_hub, tmp_path, listed_sha="../../../../../../outside/snap")
    with pytest.raises(HubError) as info:
        list_files(EVIL)
    assert info.value.code == "UNSAFE"
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "UNSAFE"


def test_a_listing_for_another_repo_is_refused(fake_hub: FakeHub, tmp_path: Path,
                                               outside: Path) -> None:
    _evil_repo(fake_hub, tmp_path, listed_id="acme/Tiny-Chat-GGUF")
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "UNSAFE"


# -- 2. hashes: always checked when offered, else marked ---------------------------------------


def test_a_non_hash_etag_does_not_skip_the_listings_sha256(fake_hub: FakeHub,
                                                           tmp_path: Path) -> None:
    name = _evil_repo(fake_hub, tmp_path, big=True)
    fake_hub.repos[EVIL].etag_as[name] = "cdn-version-7"
    fake_hub.corrupt_file(EVIL, name, times=2)
    result = pull(EVIL)
    assert result.error is not None and result.error.code == "CHECKSUM_MISMATCH"
    assert not [m for m in list_local_models(include_bundled=False) if m.repo_id == EVIL]


def test_a_file_without_any_hash_is_kept_as_unverified_and_shown(
        fake_hub: FakeHub, tmp_path: Path) -> None:
    name = _evil_repo(fake_hub, tmp_path, no_hashes=True)
    fake_hub.repos[EVIL].etag_as[name] = "cdn-version-7"
    result = pull(EVIL)
    assert result.ok, result.error
    assert result.unverified == (name,)
    blob = result.path.resolve()  # named by the sha256 of what arrived
    assert blob.name == hashlib.sha256(blob.read_bytes()).hexdigest()
    [model] = [m for m in list_local_models(include_bundled=False) if m.repo_id == EVIL]
    assert model.valid and not model.verified
    listed = _models(fake_hub, "list")  # by the model's one id (issue 45)
    model_id = id_for_path(model.path)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(model_id))
    assert "unverified" in row


def test_an_unverified_file_is_checked_once_the_hub_gives_its_hash(
        fake_hub: FakeHub, tmp_path: Path) -> None:
    name = _evil_repo(fake_hub, tmp_path, big=True, no_hashes=True)
    fake_hub.repos[EVIL].etag_as[name] = "cdn-version-7"
    assert pull(EVIL).unverified == (name,)
    fake_hub.repos[EVIL].no_hashes = False
    fake_hub.repos[EVIL].etag_as.clear()
    again = pull(EVIL)
    assert again.ok and again.unverified == () and again.bytes_fetched == 0
    [model] = [m for m in list_local_models(include_bundled=False) if m.repo_id == EVIL]
    assert model.verified


# -- 3. sizes and time ------------------------------------------------------------------------


def _largest_file_while(root: Path, work) -> tuple[object, int]:  # noqa: ANN001
    """Run `work()` while sampling the largest file under `root` every few ms."""
    largest = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for p in root.rglob("*"):
                try:
                    largest[0] = max(largest[0], p.stat().st_size)
                except OSError:
                    pass
            time.sleep(0.005)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        return work(), largest[0]
    finally:
        done.set()
        watcher.join()


@pytest.mark.parametrize("big", [False, True], ids=["inline", "lfs"])
def test_a_body_past_the_announced_size_stops_at_the_first_byte_too_many(
        fake_hub: FakeHub, tmp_path: Path, big: bool) -> None:
    name = _evil_repo(fake_hub, tmp_path, big=big)
    size = fake_hub.repos[EVIL].files[name].size
    fake_hub.overrun_bytes = 64 << 20
    began = time.monotonic()
    result, largest = _largest_file_while(tmp_path, lambda: pull(EVIL))
    assert result.error is not None and result.error.code == "UNSAFE"
    assert f"more than the {size} bytes it announced" in result.error.message
    assert largest <= max(size, 4 << 20)  # the source file itself, never 64 MiB
    assert time.monotonic() - began < 10
    assert fake_hub.bytes_served[f"{EVIL}/{name}#overrun"] < 16 << 20  # reading stopped
    assert not [p for p in paths.hf_cache_dir().rglob("*.incomplete")]


def test_a_trickle_is_a_stall_and_ends_with_a_sentence(fake_hub: FakeHub, tmp_path: Path) -> None:
    _evil_repo(fake_hub, tmp_path)
    fake_hub.trickle_bps = 50  # 25 bytes per half second: far under the stall floor
    fake_hub.hang_limit_s = 20
    began = time.monotonic()
    result = pull(EVIL)
    took = time.monotonic() - began
    assert result.error is not None and result.error.code == "TIMEOUT", result.error
    assert "stall timeout" in result.error.message and "no data for 0.5 s" in result.error.message
    assert took < 6, took


@pytest.mark.parametrize("kind, bound", [("head", "first-byte"), ("get", "first-byte"),
                                         ("stall", "stall")])
def test_a_hub_that_accepts_and_never_answers_does_not_hang_pull(
        fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
        bound: str) -> None:
    _evil_repo(fake_hub, tmp_path)
    # each bound alone ends its wait: the other one is set far beyond the test's limit
    if kind == "stall":
        fake_hub.stall_after = 100
        monkeypatch.setenv("LLMDECK_HUB_FIRST_BYTE_TIMEOUT", "30")
    else:
        fake_hub.hang.add(kind)
        monkeypatch.setenv("LLMDECK_HUB_STALL_TIMEOUT", "30")
    fake_hub.hang_limit_s = 20
    began = time.monotonic()
    result = pull(EVIL)
    took = time.monotonic() - began
    assert result.error is not None and result.error.code == "TIMEOUT", result.error
    assert f"({bound} timeout)" in result.error.message
    assert "0.5 s" in result.error.message
    assert took < 6, took


def test_a_search_that_is_never_answered_ends_with_a_sentence(fake_hub: FakeHub) -> None:
    fake_hub.hang.add("api")
    fake_hub.hang_limit_s = 20
    began = time.monotonic()
    with pytest.raises(HubError) as info:
        search_models("tiny")
    assert info.value.code == "TIMEOUT" and "first-byte timeout" in info.value.message
    assert time.monotonic() - began < 6


@pytest.mark.parametrize("kind", ["api", "head", "get"])
def test_search_listing_head_and_get_are_tried_again_after_a_503(
        fake_hub: FakeHub, tmp_path: Path, kind: str) -> None:
    name = _evil_repo(fake_hub, tmp_path, big=True)
    if kind == "api":
        fake_hub.fail_next = {"api": [503]}
        assert [r.repo_id for r in search_models("Tiny-GGUF", fmt="gguf")] == [EVIL]
    fake_hub.fail_next = {kind: [503]}
    result = pull(EVIL)
    assert result.ok, result.error
    assert fake_hub.fail_next[kind] == []  # the failure was met, and tried past
    assert fake_hub.served(EVIL, name) == fake_hub.repos[EVIL].files[name].size


def _models(hub: FakeHub, *args: str) -> subprocess.CompletedProcess:
    env = {k: os.environ[k] for k in os.environ if k.startswith("LLMDECK_")}
    return subprocess.run([PYTHON, "-m", "core.hub.cli", *args],
                          env=subprocess_env(hub, **env), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_the_cli_gives_up_on_a_silent_hub_with_a_sentence(fake_hub: FakeHub,
                                                          tmp_path: Path) -> None:
    _evil_repo(fake_hub, tmp_path)
    fake_hub.hang_limit_s = 30
    fake_hub.hang.add("api")
    began = time.monotonic()
    searched = _models(fake_hub, "search", "tiny")
    assert time.monotonic() - began < 15
    assert searched.returncode == 1 and "error [TIMEOUT]" in searched.stderr
    assert "first-byte timeout" in searched.stderr
    fake_hub.hang = {"get"}
    began = time.monotonic()
    pulled = _models(fake_hub, "pull", EVIL)
    assert time.monotonic() - began < 15
    assert pulled.returncode == 1 and "error [TIMEOUT]" in pulled.stderr


# -- 4. a model folder from the Hub cannot break the list -------------------------------------


def test_a_tokenizer_config_nested_100000_deep_does_not_break_models_list(
        fake_hub: FakeHub, tmp_path: Path) -> None:
    files = mlx_repo_files(tmp_path / "src")
    files["tokenizer_config.json"] = b"[" * 100_000 + b"]" * 100_000
    files["config.json"] = json.dumps(json.loads(files["config.json"])).encode()
    fake_hub.add_repo("evil/Deep-4bit", files, library_name="mlx", tags=["mlx"])
    assert pull("evil/Deep-4bit").ok
    [model] = [m for m in list_local_models(include_bundled=False)
               if m.repo_id == "evil/Deep-4bit"]
    assert model.format == "mlx"
    listed = _models(fake_hub, "list")
    assert listed.returncode == 0, listed.stderr
    assert id_for_path(model.path) in listed.stdout and "Traceback" not in listed.stderr


# -- 5. outside text on the terminal -----------------------------------------------------------


OSC52 = "\x1b]52;c;aGVsbG8=\x07"
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"


def test_search_and_files_print_escapes_as_pictures(fake_hub: FakeHub, tmp_path: Path) -> None:
    data = make_gguf(tmp_path / "src" / "x-Q4_K_M.gguf", SMALL).read_bytes()
    fake_hub.add_repo(f"evil/{OSC52}tiny{CLEAR}", {"x-Q4_K_M.gguf": data},
                      library_name="gguf", tags=["gguf"], license=f"mit{TITLE}")
    fake_hub.add_repo("evil/Names-GGUF", {f"a{TITLE}-Q4_K_M.gguf": data,
                                         f"b{OSC52}.gguf": data, "README.md": b"hi"},
                      library_name="gguf", tags=["gguf"])
    found = _models(fake_hub, "search", "tiny", "--gguf")
    listed = _models(fake_hub, "files", "evil/Names-GGUF")
    refused = _models(fake_hub, "files", f"evil/{OSC52}tiny")
    pulled = _models(fake_hub, "pull", "evil/Names-GGUF", f"b{OSC52}.gguf")
    for run in (found, listed, refused, pulled):
        for stream in (run.stdout, run.stderr):
            assert not any(b in stream for b in ESC_BYTES), repr(stream)
    assert found.returncode == 0 and "␛]52;c;aGVsbG8=␇tiny␛[2J" in found.stdout
    assert listed.returncode == 0 and "a␛]0;pwned␇-Q4_K_M.gguf" in listed.stdout
    assert "refused: holds control characters" in listed.stdout
    assert refused.returncode == 2 and "not a valid repo id" in refused.stderr
    assert pulled.returncode == 1 and "error [UNSAFE]" in pulled.stderr


def test_a_safetensors_header_claiming_120_mb_is_not_read(tmp_path: Path) -> None:
    """A model folder whose safetensors header says it is 120 MB (a sparse file, so the
    test writes nothing): `models list` calls it invalid without reading the header."""
    import struct
    import tracemalloc

    folder = paths.models_dir() / "huge-header"
    folder.mkdir(parents=True)
    for name, body in mlx_repo_files(tmp_path / "src").items():
        if name != "model.safetensors":
            (folder / name).write_bytes(body)
    weights = folder / "model.safetensors"
    with weights.open("wb") as f:
        f.write(struct.pack("<Q", 120_000_000))
        f.truncate(8 + 120_000_000 + 16)
    tracemalloc.start()
    try:
        [model] = [m for m in list_local_models(include_bundled=False)
                   if m.path == folder]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not model.valid and "header" in (model.problem or "")
    assert peak < 32 << 20, peak


async def test_the_local_models_tab_says_a_model_is_unverified(fake_hub: FakeHub,
                                                               tmp_path: Path) -> None:
    """The person choosing a model in the hub sees what the CLI says: no hash was checked."""
    from tests.fixtures.hub_screen import SIZE, hub_app, open_hub, wait_until
    from tui.widgets.hub_local import LocalTable

    name = _evil_repo(fake_hub, tmp_path, no_hashes=True)
    fake_hub.repos[EVIL].etag_as[name] = "cdn-version-7"
    assert pull(EVIL).unverified == (name,)
    async with hub_app().run_test(size=SIZE) as pilot:
        screen = await open_hub(pilot, search=False)
        local = screen.query_one(LocalTable)
        await wait_until(pilot, lambda: any(m.repo_id == EVIL for m in local.models))
        row = next(i for i, m in enumerate(local.models) if m.repo_id == EVIL)
        state = str(local.get_row_at(row)[-1])
        assert "unverified" in state, state
