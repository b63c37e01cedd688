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


# -- chains: a turn writes only its new tokens (issue 33 follow-up) ---------------------


def _by_position(tokens: list[int]) -> list[tuple[str, str, np.ndarray]]:
    """Keys and values whose every position holds its token id: a join in the wrong
    order or at the wrong place shows in the values."""
    keys = np.broadcast_to(np.asarray(tokens, np.float32)[None, None, :, None],
                           (1, 2, len(tokens), 4)).copy()
    return [("0.keys", "float32", keys), ("0.values", "float32", -keys)]


def test_a_turn_that_extends_a_stored_prefix_writes_only_its_new_tokens(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    first = list(range(1, 101))
    whole = store.put(first, _by_position(first), {"layers": 1}, axis=2)
    turn2 = [*first, *range(500, 510)]
    link = store.put(turn2, _by_position(turn2), {"layers": 1}, axis=2)
    assert whole is not None and link is not None and whole.exists()
    header = read_header(link, ID)
    assert header.parent is not None and header.parent.name == whole.name
    assert header.parent.sha256 == read_header(whole, ID).digest and header.base == 100
    assert header.nbytes == 2 * 2 * 10 * 4 * 4  # ten new tokens' keys and values only
    assert link.stat().st_size < whole.stat().st_size / 3
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    match = store.best([*turn2, 7])
    assert match is not None and match.covered == 110 and match.path == link
    chain = store.load_chain(match)
    assert chain is not None and [h.base for h, _ in chain] == [0, 100]
    joined = store.load(match)
    assert joined is not None
    assert np.array_equal(joined["0.keys"], _by_position(turn2)[0][2])
    assert np.array_equal(joined["0.values"], _by_position(turn2)[1][2])
    # a prompt that forks inside the first file takes that file alone (fewer bytes)
    fork = store.best([*first[:50], 9])
    assert fork is not None and fork.path == whole
    # without an axis (llama.cpp's opaque state) every write is whole
    plain = store.put([*turn2, 1, 2], _sections(112), {})
    assert plain is not None and read_header(plain, ID).parent is None


@pytest.mark.parametrize("damage", ["flip", "missing", "rewritten", "truncated"])
def test_a_broken_middle_link_makes_the_whole_chain_ignored_and_removed(
        tmp_path: Path, damage: str) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    tokens = list(range(1, 41))
    paths = [store.put(tokens[:n], _by_position(tokens[:n]), {"layers": 1}, axis=2)
             for n in (20, 30, 40)]
    assert all(p is not None and p.exists() for p in paths)
    middle = paths[1]
    assert middle is not None
    if damage == "flip":
        data = bytearray(middle.read_bytes())
        data[-5] ^= 0x40
        middle.write_bytes(bytes(data))
    elif damage == "missing":
        middle.unlink()
    elif damage == "truncated":
        middle.write_bytes(middle.read_bytes()[:-8])
    else:  # a sound file for the same tokens, but not the one its child was built on
        other = KvDiskStore(tmp_path / "other", ID, 1 << 20)
        again = other.put(tokens[:30], _sections(30, fill=9.0), {"layers": 1})
        assert again is not None
        middle.write_bytes(again.read_bytes())
    match = store.best([*tokens, 99])
    if damage == "missing":  # a link whose parent file is gone is removed when listed;
        # the sound first file still serves its own 20 tokens
        assert match is not None and match.covered == 20 and match.path == paths[0]
        assert not paths[2].exists()  # type: ignore[union-attr]
        joined = store.load(match)
        assert joined is not None and np.array_equal(joined["0.keys"], _by_position(tokens[:20])[0][2])
        return
    assert match is not None and match.path == paths[2]
    assert store.load(match) is None  # never trusted: the whole chain goes
    assert not any(p.exists() for p in paths if p is not None)
    assert store.best([*tokens, 99]) is None


def test_a_chain_is_bounded_and_rewritten_whole(tmp_path: Path) -> None:
    from core.engines.kv_store import MAX_LINKS

    store = KvDiskStore(tmp_path / "kv", ID, 1 << 22)
    tokens = list(range(1, 10 * (MAX_LINKS + 3) + 1))
    for n in range(10, len(tokens) + 1, 10):
        store.put(tokens[:n], _by_position(tokens[:n]), {"layers": 1}, axis=2)
        files = list(store.folder.glob("*.kv"))
        assert len(files) <= MAX_LINKS  # the superseded old chain went with the rewrite
        assert max(read_header(f, ID).depth for f in files) < MAX_LINKS
    match = store.best([*tokens, 0])
    assert match is not None and match.covered == len(tokens)
    joined = store.load(match)
    assert joined is not None and np.array_equal(joined["0.keys"], _by_position(tokens)[0][2])


def test_an_evicted_parent_takes_its_links_and_the_bound_holds(tmp_path: Path) -> None:
    one = 2 * 2 * 64 * 4 * 4 + 2048  # a 64-token file and its header, about
    store = KvDiskStore(tmp_path / "kv", ID, 3 * one)
    old = list(range(1000, 1064))
    store.put(old, _by_position(old), {"layers": 1}, axis=2)
    store.put([*old, 5, 6], _by_position([*old, 5, 6]), {"layers": 1}, axis=2)
    for f in store.folder.glob("*.kv"):  # that conversation is idle since long ago
        os.utime(f, ns=(1, 1))
    for i in range(3):
        other = [i, *range(2000, 2063)]
        store.put(other, _by_position(other), {"layers": 1}, axis=2)
        total = sum(f.stat().st_size for f in (tmp_path / "kv").rglob("*.kv"))
        assert total <= store.max_bytes
    names = [f.name for f in store.folder.glob("*.kv")]
    keys = {n.split(".")[0] for n in names}
    assert all(n.count(".") == 1 or n.split(".")[1] in keys for n in names), names
    assert store.best([*old, 5, 6, 7]) is None


# -- issue 44 item 6: files planted where the next turn reads its cache -------------------


def _planted(store: KvDiskStore, tokens: list[int]) -> Path:
    """Where a cache file for `tokens` goes in `store`'s folder."""
    from core.engines.kv_store import tokens_key

    return store.folder / f"{tokens_key(tokens)}.kv"


def test_a_symlink_to_a_cache_file_outside_is_not_followed(tmp_path: Path) -> None:
    outside = KvDiskStore(tmp_path / "outside", ID, 1 << 20).put([1, 2, 3, 4], _sections(4), {})
    assert outside is not None
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    link = _planted(store, [1, 2, 3, 4])
    link.symlink_to(outside)
    assert store.best([1, 2, 3, 4, 5]) is None
    assert not os.path.lexists(link) and outside.exists()  # the link goes, its target stays
    # a link swapped in after the listing is refused when read, too
    real = store.put([1, 2, 3, 4], _sections(4), {})
    assert real is not None
    match = store.best([1, 2, 3, 4, 5])
    assert match is not None
    real.unlink()
    real.symlink_to(outside)
    assert store.load(match) is None
    assert outside.exists()
    with pytest.raises(BadKvFile):
        read_header(real)


def _fifo_attack(tmp_path: Path, via_link: bool) -> tuple[bool, object]:
    """Plant a FIFO (or a link to one outside) as a cache file; (the lookup returned
    within 5 s, what it returned). A blocked reader is let go by opening the FIFO."""
    import threading

    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    fifo = tmp_path / "fifo" if via_link else _planted(store, [1, 2, 3, 4])
    os.mkfifo(fifo)
    if via_link:
        _planted(store, [1, 2, 3, 4]).symlink_to(fifo)
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(store.best([1, 2, 3, 4, 5])), daemon=True)
    t.start()
    t.join(5)
    done = not t.is_alive()
    if not done:  # the old code waits for a writer: give it one so the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
    return done, got[0] if got else None


@pytest.mark.parametrize("via_link", [False, True], ids=["fifo", "link-to-fifo"])
def test_a_fifo_named_like_a_cache_file_never_blocks_the_turn(tmp_path: Path, via_link: bool) -> None:
    done, match = _fifo_attack(tmp_path, via_link)
    assert done, "the lookup blocked on a FIFO"
    assert match is None


def _huge_claim(store: KvDiskStore, tokens: list[int], claim: int) -> Path:
    """A sparse file whose header claims a section of `claim` bytes (bad checksum)."""
    import json
    import struct

    n = claim // 4
    header = {"identity": store.identity, "tokens": tokens, "meta": {},
              "sections": [{"name": "0.keys", "dtype": "float32", "shape": [1, 1, 1, n],
                            "nbytes": claim, "sha256": "0" * 64}]}
    blob = json.dumps(header).encode()
    path = _planted(store, tokens)
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(blob)) + blob)
        f.truncate(len(MAGIC) + 8 + len(blob) + claim)
    return path


def test_a_header_claiming_more_than_the_bound_is_refused_unread(tmp_path: Path) -> None:
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 30)  # a 1 GiB bound
    path = _huge_claim(store, [1, 2, 3, 4], 3 << 29)  # 1.5 GiB
    assert store.best([1, 2, 3, 4, 5]) is None
    assert not path.exists()


def test_a_header_claiming_more_than_its_tokens_hold_is_refused_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import core.engines.kv_file as kv_file

    store = KvDiskStore(tmp_path / "kv", ID, 4 << 30)
    path = _huge_claim(store, [1, 2, 3, 4], 3 << 29)
    match = store.best([1, 2, 3, 4, 5])
    assert match is not None  # within the bound: listed

    def unread(*_a: object) -> list[str]:
        raise AssertionError("a section was read")

    monkeypatch.setattr(kv_file, "_hash_all", unread)
    assert store.load(match, per_token=1 << 20) is None
    assert not path.exists()


@pytest.mark.parametrize("shape", [[1, 2**32, 2**32], [0, 2**62]],
                         ids=["wraps-to-0-elements", "empty-but-unbuildable"])
def test_a_header_whose_shape_numpy_cannot_build_is_refused_and_removed(
        tmp_path: Path, shape: list[int]) -> None:
    """A planted header whose shape's element count wraps numpy's int64 (to the 0 bytes it
    claims, with the empty checksum) or names an array numpy refuses: a lookup skips and
    removes it, as any bad file, instead of a ValueError from deep in the load."""
    import hashlib
    import json
    import struct

    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    header = {"identity": store.identity, "tokens": [1, 2, 3, 4], "meta": {},
              "sections": [{"name": "0.keys", "dtype": "float32", "shape": shape,
                            "nbytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}]}
    blob = json.dumps(header).encode()
    path = _planted(store, [1, 2, 3, 4])
    path.write_bytes(MAGIC + struct.pack("<Q", len(blob)) + blob)
    match = store.best([1, 2, 3, 4, 5])
    assert match is None or store.load(match) is None
    assert not path.exists()


def test_sections_are_mapped_not_copied(tmp_path: Path) -> None:
    """A loaded file's sections share one payload mapped from the file (a loader hands it
    to a device in one copy), at the offsets the header lists."""
    from core.engines.kv_file import read_sections

    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    path = store.put([1, 2, 3, 4], _sections(4), {})
    assert path is not None
    header = read_header(path)
    got = read_sections(path, header)
    assert got.offsets == {"0.keys": 0, "0.values": 128}
    assert np.shares_memory(got["0.values"], got.payload)


def test_a_chain_loaded_before_its_checksums_is_refused_at_verify(tmp_path: Path) -> None:
    """wait=False hands the sections out while their checksums run (a loader copies
    meanwhile); a damaged file is refused and removed at verify, before any use."""
    store = KvDiskStore(tmp_path / "kv", ID, 1 << 20)
    path = store.put([1, 2, 3, 4], _sections(4), {})
    assert path is not None
    match = store.best([1, 2, 3, 4, 5])
    assert match is not None
    good = store.load_chain(match, wait=False)
    assert good is not None and store.verify(match, good)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    bad = store.load_chain(match, wait=False)
    assert bad is not None  # handed out unchecked...
    assert not store.verify(match, bad)  # ...and refused before use
    assert not path.exists()
