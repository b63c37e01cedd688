"""The disk KV cache stays off the next turn's path and is read only when that beats a
prefill (issue 49 items 1-2): a small random-weight MLX model in process, the cache
folder the test's own LLMDECK_HOME."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from core import paths
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.kv_cost import NAME, LoadCost
from core.engines.kv_store import KvWriter
from core.events import Done, Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly. " * 25}
FIRST = {"role": "user", "content": "Count to ten, then name three colours."}
OTHER = {"role": "user", "content": "Name five animals, then count backwards from nine."}


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("kv-pacing") / "tiny-qwen3", QWEN3_SHAPE, seed=3)


@pytest.fixture(scope="module")
def tiny_qwen3_d64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Heads of 64 dimensions: keys and values quantise in groups of 64 (8-bit files)."""
    shape = {**QWEN3_SHAPE, "head_dim": 64}
    return build_model_dir(tmp_path_factory.mktemp("kv-pacing") / "tiny-qwen3-d64", shape, seed=3)


def _engine(model: Path, *options: tuple[str, object]):  # noqa: ANN202 - MlxEngine
    from core.engines.mlx import MlxEngine

    return MlxEngine(ModelSpec(str(model), "mlx", context_size=1024, options=(
        ("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0.05), *options)))


def _files() -> list[Path]:
    return sorted((paths.cache_dir() / "kv").rglob("*.kv"))


def _request(rid: str, messages: list[dict], max_tokens: int = 12) -> GenerationRequest:
    return GenerationRequest(rid, tuple(messages), SamplingParams(temperature=0.0,
                                                                  max_tokens=max_tokens))


def _until_done(engine, rid: str) -> Usage:  # noqa: ANN001
    usage = None
    while True:
        for got, events in engine.step():
            for e in events:
                if got == rid and isinstance(e, Usage):
                    usage = e
                if got == rid and isinstance(e, Done):
                    assert usage is not None
                    return usage


def _settle(engine) -> None:  # noqa: ANN001
    while engine.has_work():
        engine.step()
    engine._kv.writer.flush(30)


def test_a_finished_turns_cache_is_never_written_while_the_next_request_runs(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """A turn's cache is handed to the writer in the idle time after it; the next request
    comes before the writer gets to it (held here by a job ahead of it): the write waits
    until that request is done. Before, the writer wrote it while the request ran."""
    engine = _engine(tiny_qwen3)
    release = threading.Event()
    try:
        assert engine._kv.writer.submit(lambda: release.wait(10))  # the writer is held
        engine.submit(_request("a", [SYSTEM, FIRST]))
        _until_done(engine, "a")
        while engine.has_work():  # the idle steps: a's cache goes to the writer's queue
            engine.step()
        engine.submit(_request("b", [SYSTEM, OTHER], max_tokens=24))
        engine.step()  # b is admitted and prefilled
        release.set()
        engine._kv.writer.flush(2)
        assert not _files(), "a cache was written while the next request ran"
        _until_done(engine, "b")
        _settle(engine)
        assert _files(), "the idle time after the turns wrote their caches"
    finally:
        release.set()
        engine.close()


def test_the_writer_pauses_while_the_engine_is_busy() -> None:
    writer = KvWriter()
    ran = threading.Event()
    try:
        writer.busy(True)
        assert writer.submit(ran.set)
        assert not writer.flush(0.2) and not ran.is_set()
        writer.busy(False)
        assert writer.flush(5) and ran.is_set()
    finally:
        writer.close()


def _write_first_turn(model: Path, *options: tuple[str, object]) -> list[dict]:
    first = _engine(model, *options)
    try:
        engine_reply = []
        first.submit(_request("t1", [SYSTEM, FIRST], max_tokens=16))
        while first.has_work():
            for _rid, events in first.step():
                engine_reply.extend(e.text for e in events if hasattr(e, "text"))
    finally:
        first.close()  # finishes the next-turn cache and its write
    assert _files()
    return [SYSTEM, FIRST, {"role": "assistant", "content": "".join(engine_reply)},
            {"role": "user", "content": "Again."}]


def _restart_turn(model: Path, messages: list[dict], *options: tuple[str, object]) -> Usage:
    engine = _engine(model, *options)
    try:
        engine.submit(_request("t2", messages))
        return _until_done(engine, "t2")
    finally:
        engine.close()


def test_a_restart_reads_the_file_only_when_that_beats_a_prefill(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """With the rates measured so far saying a prefill is far faster than reading, a
    restarted engine prefills; with them saying the opposite, it reads the file. Before,
    it always read."""
    messages = _write_first_turn(tiny_qwen3)
    folder = _files()[0].parent
    saved = json.loads((folder / NAME).read_text())
    assert saved["prefill_tps"] > 0  # the first turn's prefill was measured
    LoadCost(prefill_tps=1e8).save(folder)  # prefill "far faster" than the default read
    fast = _restart_turn(tiny_qwen3, messages)
    assert fast.cached_tokens == 0, fast
    cost = LoadCost(prefill_tps=1.0)  # prefill "far slower"
    cost.save(folder)
    slow = _restart_turn(tiny_qwen3, messages)
    assert slow.cached_tokens > 0, slow
    assert LoadCost.load(folder).reads, "the read was measured and kept"


def test_an_8_bit_file_is_smaller_and_serves_a_restart(
        tiny_qwen3_d64: Path, llmdeck_home: Path) -> None:
    messages = _write_first_turn(tiny_qwen3_d64)
    full = sum(f.stat().st_size for f in _files())
    for f in _files():
        f.unlink()
    messages = _write_first_turn(tiny_qwen3_d64, ("kv_disk_bits", 8))
    eight = sum(f.stat().st_size for f in _files())
    assert eight < 0.5 * full, (eight, full)  # float32 keys and values: about 0.28x
    usage = _restart_turn(tiny_qwen3_d64, messages, ("kv_disk_bits", 8))
    assert usage.cached_tokens > 0, usage


def test_the_rates_file_is_trusted_no_further_than_the_cache_files(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    LoadCost(prefill_tps=5.0).save(tmp_path)
    (tmp_path / NAME).rename(outside)
    (tmp_path / NAME).symlink_to(outside)
    assert LoadCost.load(tmp_path).prefill_tps is None
    (tmp_path / NAME).unlink()
    os.mkfifo(tmp_path / NAME)
    assert LoadCost.load(tmp_path).prefill_tps is None  # and it did not block


@pytest.mark.parametrize("text", ["[" * 4000, '{"reads": [true, true], "prefill_tps": true}'],
                         ids=["nested-deep", "booleans"])
def test_a_hostile_rates_file_is_no_rate_measured(tmp_path: Path, text: str) -> None:
    """Brackets nested past json's recursion limit (it raised RecursionError, which took
    the MLX engine's load down with it) and true for a rate (1 byte a second) are read
    as no rate measured."""
    (tmp_path / NAME).write_text(text)
    cost = LoadCost.load(tmp_path)
    assert cost.prefill_tps is None and not cost.reads


def test_the_cost_model_compares_a_read_with_a_prefill() -> None:
    cost = LoadCost()
    assert cost.worth_reading(10**9, 100)  # no prefill measured: read
    assert cost.prefilled(1000, 0.1)  # 10k tokens a second
    assert not cost.prefilled(1000, 1.0)  # a slower one waited behind others: ignored
    cost.read(10**9, 1.0)  # 1 GB a second
    assert cost.worth_reading(10**7, 1000)  # 10 ms against 100 ms
    assert not cost.worth_reading(10**9, 1000)  # 1 s against 100 ms


def test_only_a_lone_requests_prefill_feeds_the_cost_model(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """Requests prefilled together wait for each other: their TTFTs are no prefill rate
    (taken as one, the cost model read 240 MB files on an H200 where a prefill took 50 ms)."""
    engine = _engine(tiny_qwen3)
    try:
        engine.submit(_request("a", [SYSTEM, FIRST]))
        engine.submit(_request("b", [SYSTEM, OTHER]))
        while engine.has_work():
            engine.step()
        assert engine._kv.cost.prefill_tps is None
        alone = {"role": "system", "content": "You answer in French, briefly. " * 40}
        engine.submit(_request("c", [alone, {"role": "user", "content": "Alone now."}]))
        _until_done(engine, "c")
        assert engine._kv.cost.prefill_tps is not None
    finally:
        engine.close()


def test_a_replys_next_turn_cache_replaces_its_cache_as_generated_in_memory(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """A conversation keeps one entry in memory after a reply, not the cache as generated
    plus its next-turn form (both hold the prompt; keeping both doubled each
    conversation's memory, and on an H200 8 long conversations then overflowed the prefix
    cache: later turns 3x slower with the disk cache on). Before, both stayed."""
    engine = _engine(tiny_qwen3)
    try:
        engine.submit(_request("a", [SYSTEM, FIRST]))
        _until_done(engine, "a")
        _settle(engine)
        assert len(engine._prefix) == 1
        # the prompt is still served from memory (a regenerated turn)
        engine.submit(_request("a2", [SYSTEM, FIRST]))
        usage = _until_done(engine, "a2")
        assert usage.cached_tokens >= usage.prompt_tokens - 1
    finally:
        engine.close()


def _settle_probe(engine) -> None:  # noqa: ANN001
    """The idle work, the writer's writes, then what they leave for idle time (the read
    probe of a file just written)."""
    while True:
        _settle(engine)
        if not engine.has_work():
            return


def test_a_fresh_homes_restart_reads_the_file_once_idle_time_measured_a_read(
        tiny_qwen3: Path, llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh home has no read measured. The first engine's idle time after its write
    times a read of that file through the load path, so the restarted engine decides with
    a measured rate, and reading wins here. Before, only a restart's read measured one:
    with the default rate saying a prefill is faster, the file was never read (on the
    H200: restart_over_cold 0.854 against the 0.6 the read allows)."""
    from core.engines import kv_cost, kv_mlx_load

    monkeypatch.setattr(kv_mlx_load, "PROBE_MIN_BYTES", 0)  # the tiny model's files are small
    monkeypatch.setattr(kv_cost, "DEFAULT_READ_BPS", 1e-3)  # unmeasured, reading looks hopeless
    engine = _engine(tiny_qwen3)
    try:
        engine.submit(_request("t1", [SYSTEM, FIRST], max_tokens=16))
        reply = []
        while engine.has_work():
            for _rid, events in engine.step():
                reply.extend(e.text for e in events if hasattr(e, "text"))
        _settle_probe(engine)
    finally:
        engine.close()
    folder = _files()[0].parent
    cost = LoadCost.load(folder)
    assert cost.reads, "no read rate was measured in the idle time after the write"
    messages = [SYSTEM, FIRST, {"role": "assistant", "content": "".join(reply)},
                {"role": "user", "content": "Again."}]
    usage = _restart_turn(tiny_qwen3, messages)
    assert usage.cached_tokens > 0, usage


def test_the_read_probe_waits_while_a_request_is_in_hand(
        tiny_qwen3: Path, llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.engines import kv_mlx_load

    monkeypatch.setattr(kv_mlx_load, "PROBE_MIN_BYTES", 0)
    engine = _engine(tiny_qwen3)
    try:
        engine.submit(_request("a", [SYSTEM, FIRST]))
        _until_done(engine, "a")
        _settle_probe(engine)
        keeper = engine._kv
        assert keeper.cost.reads  # probed once the write landed
        keeper.cost.reads.clear()
        keeper._probed = False
        engine.submit(_request("b", [SYSTEM, OTHER], max_tokens=24))
        keeper._probe_path = _files()[0]  # a write lands while b waits
        done = False
        while not done:
            for rid, events in engine.step():
                done = done or (rid == "b" and any(isinstance(e, Done) for e in events))
            if not done:
                assert not keeper.cost.reads, "the probe ran while a request was in hand"
        _settle_probe(engine)
        assert keeper.cost.reads and keeper._probe_path is None
    finally:
        engine.close()


def test_a_turn_over_its_history_in_memory_is_a_pass_and_one_read_from_disk_is_not(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """The cost model charges a read the pass over the history that follows it, measured
    from turns whose history was in memory; a turn whose history was read from disk
    holds the read in its time to first token, so it is no pass."""
    messages = _write_first_turn(tiny_qwen3)
    folder = _files()[0].parent
    LoadCost(prefill_tps=1.0).save(folder)  # reading wins
    engine = _engine(tiny_qwen3)
    try:
        engine.submit(_request("t2", messages))
        reply = []
        usage = None
        while usage is None:
            for rid, events in engine.step():
                reply.extend(e.text for e in events if rid == "t2" and hasattr(e, "text"))
                usage = next((e for e in events if isinstance(e, Usage)), usage)
        assert usage.cached_tokens > 0  # from disk
        _settle(engine)
        assert engine._kv.cost.pass_s is None
        third = [*messages, {"role": "assistant", "content": "".join(reply)},
                 {"role": "user", "content": "Once more."}]
        engine.submit(_request("t3", third))
        usage = _until_done(engine, "t3")
        assert usage.cached_tokens >= 256
        assert engine._kv.cost.pass_s is not None
    finally:
        engine.close()
