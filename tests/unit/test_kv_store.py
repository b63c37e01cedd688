"""The KV-cache store on disk: what it keeps, what it refuses, and its bound (issue 33)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from core.engines.kv_file import MAGIC, BadKvFile, read_header
from core.engines.kv_store import KvDiskStore, KvWriter, model_identity

ID = "a" * 64


def _sections(n: int, fill: float = 1.0) -> list[tuple[str, str, np.ndarray]]:
    keys = np.full((1, 2, n, 4), fill, dtype=np.float32)
    return [("0.keys", "float32", keys), ("0.values", "float32", keys * 2)]


def test_a_stored_prefix_comes_back_for_a_longer_prompt(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    store.put([1, 2, 3, 4], _sections(4), {"layers": 1}, text="abcd", marks=[(4, 4)])
    match = store.best([1, 2, 3, 4, 5, 6])
    assert match is not None and match.covered == 4
    loaded = store.load(match)
    assert loaded is not None
    assert np.array_equal(loaded["0.values"], np.full((1, 2, 4, 4), 2.0, np.float32))
    assert store.tokens_for("abcdef") == ([1, 2, 3, 4], 4, ((4, 4),))
    # a prompt that forks inside the stored tokens shares up to the fork
    fork = store.best([1, 2, 9, 9])
    assert fork is not None and fork.covered == 2
    # one token is always left to feed
    whole = store.best([1, 2, 3, 4])
    assert whole is not None and whole.covered == 3


def test_the_longest_prefix_wins_and_supersedes_the_shorter(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    store.put([1, 2, 3], _sections(3), {})
    store.put([7, 8, 9], _sections(3), {})  # another conversation stays
    store.put([1, 2, 3, 4, 5], _sections(5), {})
    assert len(store) == 2
    match = store.best([1, 2, 3, 4, 5, 6])
    assert match is not None and match.covered == 5


def test_files_are_private(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    path = store.put([1, 2, 3], _sections(3), {})
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "kv").stat().st_mode) == 0o700


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "garbage", "foreign"])
def test_a_damaged_or_foreign_file_is_never_used_and_is_removed(tmp_path: Path, damage: str) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    path = store.put([1, 2, 3, 4], _sections(4), {})
    assert path is not None
    match = store.best([1, 2, 3, 4, 5])
    assert match is not None
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x40
    elif damage == "truncate":
        data = data[:-10]
    elif damage == "extend":
        data += b"\0" * 16
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:  # the same file written for another model, put in this model's folder
        other = KvDiskStore(tmp_path / "other", "b" * 64, 1 << 20)
        data = bytearray(other.put([1, 2, 3, 4], _sections(4), {}).read_bytes())  # type: ignore[union-attr]
    path.write_bytes(bytes(data))
    assert store.load(match) is None
    assert not path.exists()
    assert store.best([1, 2, 3, 4, 5]) is None


def test_a_file_with_a_bad_header_is_removed_when_listed(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    bad = store.folder / ("0" * 40 + ".kv")
    bad.write_bytes(MAGIC + (10**12).to_bytes(8, "little") + b"{}")
    huge = store.folder / ("1" * 40 + ".kv")
    header = b'{"identity":"' + ID.encode() + b'","tokens":[1,2],"meta":{},"sections":' \
        b'[{"name":"x","dtype":"float32","shape":[1000000000],"nbytes":4000000000,' \
        b'"sha256":"' + b"0" * 64 + b'"}]}'
    huge.write_bytes(MAGIC + len(header).to_bytes(8, "little") + header)
    with pytest.raises(BadKvFile):
        read_header(huge, ID)
    assert store.best([1, 2, 3]) is None
    assert not bad.exists() and not huge.exists()


def test_the_store_stays_under_its_bound_least_recently_used_first(tmp_path: Path) -> None:
    one = 1 * 2 * 64 * 4 * 4 * 2  # bytes of the two sections of a 64-token cache
    store = KvDiskStore(tmp_path / "kv", ID, 3 * one + 3 * 2048)
    paths = [store.put([i, *range(100, 163)], _sections(64), {}) for i in range(3)]
    assert all(p is not None for p in paths)
    os.utime(paths[0], ns=(1, 1))  # the oldest ...
    os.utime(paths[1], ns=(2, 2))
    os.utime(paths[2], ns=(3, 3))
    first = store.best([0, *range(100, 163), 5])
    assert first is not None and store.load(first) is not None  # ... used again now
    for i in range(3, 8):
        store.put([i, *range(100, 163)], _sections(64), {})
        total = sum(f.stat().st_size for f in (tmp_path / "kv").rglob("*.kv"))
        assert total <= store.max_bytes
    names = {p.name for p in (tmp_path / "kv").rglob("*.kv")}
    assert paths[1].name not in names and paths[2].name not in names
    # the bound counts every model's files
    other = KvDiskStore(tmp_path / "kv", "c" * 64, store.max_bytes)
    other.put([1, *range(100, 163)], _sections(64), {})
    assert sum(f.stat().st_size for f in (tmp_path / "kv").rglob("*.kv")) <= store.max_bytes


def test_a_write_that_fails_is_skipped_and_the_writer_goes_on(tmp_path: Path) -> None:
    writer = KvWriter()
    done: list[int] = []

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    assert writer.submit(full_disk)
    assert writer.flush(5)
    assert writer.submit(lambda: done.append(1))
    writer.close()
    assert done == [1]


def test_the_identity_changes_with_the_weights(tmp_path: Path) -> None:
    w = tmp_path / "model.safetensors"
    w.write_bytes(b"x" * 10)
    before = model_identity("mlx", [w])
    w.write_bytes(b"y" * 11)
    assert model_identity("mlx", [w]) != before
