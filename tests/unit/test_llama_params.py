"""When llama.cpp's repacked-weight buffers are turned off (core/engines/llama_params.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines import llama_params


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu {flags}\n\n")
    return path


def test_amx_is_read_from_the_cpu_flags(tmp_path: Path) -> None:
    assert llama_params.cpu_has_amx(_cpuinfo(tmp_path, "avx2 amx_bf16 amx_tile amx_int8"))
    assert not llama_params.cpu_has_amx(_cpuinfo(tmp_path, "avx2 avx512f"))
    assert not llama_params.cpu_has_amx(tmp_path / "missing")


@pytest.mark.parametrize(("setting", "expected"), [("1", True), ("0", False), ("no", False)])
def test_the_environment_decides_when_set(monkeypatch, setting: str, expected: bool) -> None:
    monkeypatch.setenv("LLMDECK_LLAMA_REPACK", setting)
    assert llama_params.repack_weights() is expected


def test_without_a_setting_amx_turns_repacking_off(monkeypatch) -> None:
    monkeypatch.delenv("LLMDECK_LLAMA_REPACK", raising=False)
    monkeypatch.setattr(llama_params, "cpu_has_amx", lambda: True)
    assert not llama_params.repack_weights()
    monkeypatch.setattr(llama_params, "cpu_has_amx", lambda: False)
    assert llama_params.repack_weights()


def test_load_restores_llama_cpp_defaults(monkeypatch) -> None:
    """The defaults are changed only while Llama() reads them."""
    import llama_cpp.llama_cpp as low

    monkeypatch.setenv("LLMDECK_LLAMA_REPACK", "0")
    original = low.llama_model_default_params
    with pytest.raises(ValueError):
        llama_params.load_llama(model_path="/nonexistent/model.gguf", verbose=False)
    assert low.llama_model_default_params is original
    assert original().use_extra_bufts


@pytest.mark.parametrize("cores", [1, 2, 8, 11, 16])
def test_two_replicas_share_the_cores_without_overlap(cores: int) -> None:
    """llama.cpp's default two workers of a model: their threads add up to the cores, each
    core used once (each took every core before: 2 x cores threads)."""
    counts = [llama_params.worker_threads(None, 2, i, cores=cores) for i in range(2)]
    assert all(n >= 1 for n in counts)
    assert sum(counts) == max(cores, 2)
    assert max(counts) - min(counts) <= 1
    assert llama_params.worker_threads(None, 2, None, cores=cores) == max(1, cores // 2)


def test_more_replicas_than_cores_each_keep_one_thread() -> None:
    assert [llama_params.worker_threads(None, 4, i, cores=2) for i in range(4)] == [1, 1, 1, 1]


def test_the_threads_option_overrides_the_share_and_a_lone_worker_takes_every_core() -> None:
    assert llama_params.worker_threads(6, 2, 0, cores=8) == 6
    assert llama_params.worker_threads(None, None, None, cores=8) == 8
    assert llama_params.worker_threads(None, 1, 0, cores=8) == 8
    # An option that is no thread count is ignored rather than handed to llama.cpp.
    for bad in (0, -3, "many", True, 2.5):
        assert llama_params.worker_threads(bad, 2, 0, cores=8) == 4
    assert llama_params.usable_cores() >= 1


def test_llmdeck_cores_caps_the_cores_and_nonsense_is_ignored(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("LLMDECK_CORES", raising=False)
    every = llama_params.usable_cores()
    monkeypatch.setenv("LLMDECK_CORES", "1")
    assert llama_params.usable_cores() == 1
    monkeypatch.setenv("LLMDECK_CORES", str(every + 5))
    assert llama_params.usable_cores() == every  # a cap, never more than the machine's
    for junk in ("0", "-2", "two", ""):
        monkeypatch.setenv("LLMDECK_CORES", junk)
        assert llama_params.usable_cores() == every
