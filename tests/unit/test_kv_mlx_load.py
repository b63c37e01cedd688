"""A cache file's payload on its way to the MLX device (core.engines.kv_mlx_load): whole,
checked before use, and the cost model's probe bounded (issue 49 item 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from core.engines import kv_mlx_load
from core.engines.kv_cost import NAME, LoadCost
from core.engines.kv_file import BadKvFile, Section, read_header, read_sections, write_file
from core.engines.kv_mlx_load import PayloadStream, on_device, probe_read

ID = "b" * 64


def _file(folder: Path, tokens: int = 6) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    arrays = {
        "0.keys": rng.standard_normal((1, 2, tokens, 8)).astype(np.float32),
        "0.values": rng.integers(0, 2**15, (1, 2, tokens, 8), dtype=np.uint16),  # bfloat16 bits
        "1.keys": rng.integers(0, 2**31, (1, 2, tokens, 2), dtype=np.uint32),
    }
    dtypes = {"0.keys": "float32", "0.values": "bfloat16", "1.keys": "uint32"}
    path = folder / ("1" * 40 + ".kv")
    write_file(path, ID, list(range(tokens)), [(n, dtypes[n], a) for n, a in arrays.items()],
               {"layers": 1})
    return path, arrays


def _load(path: Path, copy: str = "stream") -> tuple[dict[str, mx.array], object]:
    header = read_header(path, ID)
    sections = read_sections(path, header, wait=False, hash=False)
    return on_device(header, sections, copy), sections


@pytest.mark.parametrize("copy", ["stream", "device"])
def test_the_payload_reaches_mlx_whole_in_each_sections_dtype(tmp_path: Path, copy: str) -> None:
    path, arrays = _file(tmp_path)
    loaded, sections = _load(path, copy)
    sections.verify()  # type: ignore[attr-defined]
    assert np.array_equal(np.asarray(loaded["0.keys"]), arrays["0.keys"])
    assert loaded["0.values"].dtype == mx.bfloat16
    assert np.array_equal(np.asarray(loaded["0.values"].view(mx.uint16)), arrays["0.values"])
    assert np.array_equal(np.asarray(loaded["1.keys"]), arrays["1.keys"])


def test_a_flipped_byte_is_caught_before_any_use(tmp_path: Path) -> None:
    path, _ = _file(tmp_path)
    header = read_header(path, ID)
    at = header.payload_at + header.sections[0].nbytes + 3  # inside the second section
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    _, sections = _load(path)
    with pytest.raises(BadKvFile, match="0.values"):
        sections.verify()  # type: ignore[attr-defined]


def test_a_section_read_in_pieces_never_verifies(tmp_path: Path) -> None:
    """Only a section copied whole is hashed as copied; one read in two pieces has no
    checksum, so it fails the check instead of passing unchecked."""
    path, _ = _file(tmp_path)
    header = read_header(path, ID)
    sections = read_sections(path, header, wait=False, hash=False)
    stream = PayloadStream(sections, header)
    head = stream.seek(0, 2) - stream.nbytes
    stream.seek(head)
    first = header.sections[0].nbytes
    out = bytearray(stream.nbytes)
    assert stream.readinto(memoryview(out)[: first + 5]) == first + 5
    assert stream.readinto(memoryview(out)[first + 5:]) == stream.nbytes - first - 5
    sections.pending = stream.pending()  # type: ignore[attr-defined]
    with pytest.raises(BadKvFile):
        sections.verify()  # type: ignore[attr-defined]


def test_the_probe_reads_enough_sections_for_every_thread_and_no_more_than_its_bound() -> None:
    mb = 1024**2
    many = [Section(f"{i}", "uint8", (mb,), mb, "0" * 64) for i in range(300)]
    count = kv_mlx_load._probe_count(many)
    assert count >= 2 * kv_mlx_load.HASH_THREADS
    assert count * mb >= kv_mlx_load.PROBE_BYTES
    assert count * mb <= kv_mlx_load.PROBE_MAX_BYTES
    huge = [Section(f"{i}", "uint8", (400 * mb,), 400 * mb, "0" * 64) for i in range(4)]
    assert kv_mlx_load._probe_count(huge) == 1  # never nothing, never a second huge one


def test_the_probe_times_a_verified_read_and_skips_small_or_bad_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _file(tmp_path, tokens=64)
    assert probe_read(path, ID, 1 << 30, "stream") is None  # under PROBE_MIN_BYTES
    monkeypatch.setattr(kv_mlx_load, "PROBE_MIN_BYTES", 0)
    got = probe_read(path, ID, 1 << 30, "stream")
    assert got is not None and got[0] == read_header(path, ID).nbytes and got[1] > 0
    with open(path, "r+b") as f:  # a damaged file measures nothing
        f.seek(-1, os.SEEK_END)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    assert probe_read(path, ID, 1 << 30, "stream") is None


@pytest.mark.parametrize("blob", [
    b"[" * 4000,  # nested past the recursion limit: the old loader raised RecursionError
    b'{"reads": [true, true], "prefill_tps": true}',  # booleans are no rates
    b'{"reads": [NaN, Infinity, -5, 0, 1e300], "prefill_tps": NaN}',
    b'{"reads": ["1e9"], "prefill_tps": "100"}',
    b'{"reads": {"a": 1e9}, "prefill_tps": [1]}',
    b'{"reads": [1e-300], "prefill_tps": 1e-300, "pass_s": 1e-300}',  # too small to be one
    b'{"pass_s": true}',
    b'{"pass_s": 1e9}',
    b"\xff\xfe not json",
    b"null",
    b" " * 5000,  # larger than any rates file
], ids=["deep", "booleans", "nan-inf-negative", "strings", "wrong-types", "tiny", "pass-bool",
        "pass-huge", "not-json", "null", "too-large"])
def test_a_damaged_or_hostile_rates_file_loads_as_none_measured(tmp_path: Path, blob: bytes) -> None:
    (tmp_path / NAME).write_bytes(blob)
    cost = LoadCost.load(tmp_path)
    assert not cost.reads and cost.prefill_tps is None and cost.pass_s is None


def test_the_rates_file_round_trips_and_a_folder_in_its_place_is_none_measured(tmp_path: Path) -> None:
    cost = LoadCost(prefill_tps=5000.0)
    cost.read(10**9, 0.5)
    cost.save(tmp_path)
    back = LoadCost.load(tmp_path)
    assert list(back.reads) == [2e9] and back.prefill_tps == 5000.0
    assert json.loads((tmp_path / NAME).read_text())["prefill_tps"] == 5000.0
    (tmp_path / NAME).unlink()
    (tmp_path / NAME).mkdir()
    assert not LoadCost.load(tmp_path).reads



def test_a_copy_that_fails_inside_mlx_s_read_is_a_bad_file_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLX calls the stream's readinto from its own reader: an error there comes back as
    BadKvFile (the lookup then prefills), never as MLX's RuntimeError."""
    path, _ = _file(tmp_path)

    def broken(*_args: object) -> None:
        raise OSError("the disk went away")

    monkeypatch.setattr(PayloadStream, "_fill", broken)
    with pytest.raises(BadKvFile):
        _load(path)



def test_a_read_is_charged_the_pass_that_follows_it(tmp_path: Path) -> None:
    """A restart that reads then runs a pass over the history (the turn's new tokens),
    which a prefill's rate already holds: with that pass measured, a read that only ties
    with the prefill is not taken."""
    cost = LoadCost(prefill_tps=10_000.0)  # 1,000 tokens: 100 ms
    cost.read(10**9, 1.0)  # 80 MB: 80 ms
    assert cost.worth_reading(80 * 10**6, 1000)
    assert not cost.passed(100, 10, 0.03)  # a short history is no pass
    assert not cost.passed(1000, 300, 0.03)  # many new tokens: a prefill
    assert cost.passed(1000, 10, 0.03)
    assert not cost.passed(1000, 10, 0.05)  # a slower one waited behind others
    assert not cost.worth_reading(80 * 10**6, 1000)  # 80 + 30 ms against 100 ms
    cost.save(tmp_path)
    assert LoadCost.load(tmp_path).pass_s == 0.03
