"""A GGUF of an architecture this llama.cpp cannot run (issue 48, item 13): a whole file,
written with the gguf package, whose header names an architecture llama.cpp does not know.
Loading it says "this llama.cpp cannot run <arch>", not "corrupt, download it again"; the
hub's search verdict says the same from the Hub's metadata before a download. A truly
damaged file of a known architecture keeps the corrupt advice."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from core.engines.base import EngineLoadError, ModelSpec
from core.model_files.gguf_header import gguf_architecture, known_to_llama_cpp

ARCH = "zebrallm9"  # no llama.cpp has it


def write_gguf(path: Path, arch: str) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    writer.add_uint32(f"{arch}.context_length", 64)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b"])
    writer.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_header_names_the_architecture(tmp_path: Path, bundled_gguf: Path) -> None:
    assert gguf_architecture(write_gguf(tmp_path / "z.gguf", ARCH)) == ARCH
    assert gguf_architecture(bundled_gguf) == "gemma3"
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert gguf_architecture(tmp_path / "junk.gguf") is None
    assert known_to_llama_cpp("gemma3") is True and known_to_llama_cpp("bert") is True
    assert known_to_llama_cpp(ARCH) is False


def test_loading_it_says_this_llama_cpp_cannot_run_it(tmp_path: Path) -> None:
    from core.engines.llamacpp import LlamaCppEngine

    path = write_gguf(tmp_path / "zebra-Q4_K_M.gguf", ARCH)
    with pytest.raises(EngineLoadError) as err:
        LlamaCppEngine(ModelSpec(str(path), "llamacpp", context_size=64))
    assert err.value.code == "UNSUPPORTED"
    assert f"cannot run {ARCH}" in err.value.message and "zebra-Q4_K_M.gguf" in err.value.message
    assert "Download it again" not in err.value.message and "corrupt" not in err.value.message


def test_a_damaged_file_of_a_known_architecture_is_still_called_corrupt(
        tmp_path: Path, bundled_gguf: Path) -> None:
    from core.engines.llamacpp import LlamaCppEngine

    cut = tmp_path / "cut.gguf"
    with open(bundled_gguf, "rb") as src:
        cut.write_bytes(src.read(4 * 2**20))  # the header is whole, the tensors are not
    with pytest.raises(EngineLoadError) as err:
        LlamaCppEngine(ModelSpec(str(cut), "llamacpp", context_size=64))
    assert err.value.code == "MODEL_CORRUPT" and "Download it again" in err.value.message


def test_the_hub_says_so_before_a_download() -> None:
    from core.hub.search import _to_result
    from tui.widgets.hub_format import result_detail, verdict

    def info(arch: str) -> SimpleNamespace:
        return SimpleNamespace(id=f"someone/{arch}-GGUF", config={}, gguf={
            "architecture": arch, "total": 1_000_000}, siblings=[], used_storage=10**6,
            downloads=1, likes=0, last_modified=None, tags=[], gated=False, pipeline_tag=None)

    result = _to_result(info(ARCH), "gguf")
    assert not result.runnable.ok and verdict(result.runnable) == "✗ unsupported"
    assert f"this llama.cpp cannot run {ARCH}" in result_detail(result)
    assert _to_result(info("qwen3"), "gguf").runnable.ok
