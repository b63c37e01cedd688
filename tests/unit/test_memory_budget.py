"""The memory arithmetic on real model files: weights from the files, the KV cache as
mlx-lm really allocates it (measured on a loaded model), a GGUF's from its metadata, and
the budget (automatic, from the config file, from the environment) with its sentences."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import Settings
from core.workers import memory_budget as mb
from tests.fixtures.sized_models import sized_model_dir

GIB = 2**30


def _cache_bytes_after_prefill(folder: Path, tokens: int, chunk: int) -> tuple[int, int]:
    """(bytes the model's parameters take, bytes its KV cache holds) after a real mlx-lm
    prefill of `tokens` tokens in chunks of `chunk`, as the engine prefills."""
    mx = pytest.importorskip("mlx.core")
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    model, _ = load(str(folder))
    cache = make_prompt_cache(model)
    for start in range(0, tokens, chunk):
        model(mx.zeros((1, min(chunk, tokens - start)), dtype=mx.int32), cache=cache)
        mx.eval([c.state for c in cache])
    params = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    return params, sum(c.nbytes for c in cache)


def test_an_mlx_folder_needs_its_weights_and_the_kv_cache_mlx_lm_allocates(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

    folder = build_model_dir(tmp_path / "qwen3", QWEN3_SHAPE)  # float32: 4 bytes a value
    params, cache = _cache_bytes_after_prefill(folder, 512, 512)
    need = mb.model_need(folder, 512, engine="mlx")
    assert need.known and need.context == 512
    assert need.kv_bytes == cache == 2 * 2 * 2 * 16 * 4 * 512  # K+V, 2 layers, 2 heads, 16 dims
    assert 0 <= need.weights_bytes - params < 64 * 1024  # the file: tensors plus its header
    two = mb.model_need(folder, 512, engine="mlx", replicas=2)
    assert two.total_bytes == 2 * need.total_bytes  # each MLX worker loads its own copy


def test_sliding_window_layers_hold_their_window_plus_one_prefill_chunk(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    from tests.fixtures.mlx_models import build_model_dir

    shape = {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 6,
             "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 32,
             "sliding_window_pattern": 3, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096}
    folder = build_model_dir(tmp_path / "gemma3", shape)
    _, cache = _cache_bytes_after_prefill(folder, 512, 64)
    need = mb.model_need(folder, 512, engine="mlx", prefill_chunk=64)
    per_token_layer = 2 * 16 * 2 * 4  # K+V, 16 dims, 2 heads, float32
    # 2 global layers keep all 512 tokens; 4 sliding ones at most 32 + 64 (mlx-lm's rotating
    # cache keeps one token fewer), where counting every layer in full would say 6 x 512
    assert need.kv_bytes == per_token_layer * (2 * 512 + 4 * 96)
    assert 0 <= need.kv_bytes - cache <= 4 * per_token_layer
    assert need.kv_bytes < per_token_layer * 6 * 512


def test_a_gguf_needs_its_file_and_the_cache_its_metadata_describes(bundled_gguf: Path) -> None:
    need = mb.model_need(bundled_gguf, 8192, engine="llamacpp")
    assert need.weights_bytes == bundled_gguf.stat().st_size
    # Gemma 3 270M: 18 layers, 1 KV head, keys and values of 256, f16
    assert need.kv_bytes == 18 * 1 * (256 + 256) * 2 * 8192
    two = mb.model_need(bundled_gguf, 8192, engine="llamacpp", replicas=2)
    assert two.weights_bytes == need.weights_bytes  # memory-mapped: the pages are shared
    assert two.kv_bytes == 2 * need.kv_bytes
    assert "context cache at 8,192 tokens, for 2 workers" in two.describe()


def test_the_gguf_cache_is_what_llama_cpp_allocates(bundled_gguf: Path) -> None:
    """llama.cpp prints the KV buffers it allocates (one per cache: Gemma 3 has a global and
    a sliding-window one, kept at full size); their sum is the figure admission uses."""
    script = (f"import llama_cpp; llama_cpp.Llama(model_path={str(bundled_gguf)!r}, "
              "n_ctx=4096, n_threads=1, verbose=True)")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    sizes = re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB", run.stderr)
    assert run.returncode == 0 and sizes, run.stderr[-2000:]
    allocated = sum(float(s) for s in sizes) * 2**20
    assert mb.model_need(bundled_gguf, 4096, engine="llamacpp").kv_bytes == allocated


def test_a_split_gguf_needs_every_part(bundled_gguf: Path, tmp_path: Path) -> None:
    first = tmp_path / "gemma-00001-of-00002.gguf"
    first.symlink_to(bundled_gguf)
    (tmp_path / "gemma-00002-of-00002.gguf").write_bytes(b"\0" * 1000)
    need = mb.model_need(first, 1024, engine="llamacpp")
    assert need.weights_bytes == bundled_gguf.stat().st_size + 1000
    (tmp_path / "gemma-00002-of-00002.gguf").unlink()  # a part missing: not measurable
    assert not mb.model_need(first, 1024, engine="llamacpp").known


def test_the_float_type_of_the_files_sets_the_bytes_of_a_cached_value(tmp_path: Path) -> None:
    shape = dict(layers=10, heads=8, kv_heads=4, head_dim=64, weights_bytes=10**6)
    half = mb.model_need(sized_model_dir(tmp_path / "h", dtype="BF16", **shape), 1000)
    full = mb.model_need(sized_model_dir(tmp_path / "f", dtype="F32", **shape), 1000)
    assert half.weights_bytes == full.weights_bytes == 10**6
    assert half.kv_bytes == 2 * 10 * 4 * 64 * 2 * 1000 and full.kv_bytes == 2 * half.kv_bytes


def test_what_cannot_be_measured_is_unknown_not_zero_or_an_exception(tmp_path: Path) -> None:
    assert not mb.model_need("scripted", 4096).known
    assert not mb.model_need(tmp_path / "gone.gguf", 4096).known
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\xff" * 20)
    assert not mb.model_need(tmp_path / "bad.gguf", 4096).known
    assert "unknown" in mb.UNKNOWN.describe()


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": -3, "head_dim": 8},
    {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": ["x"]},
    {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": "wide"},
    {"num_hidden_layers": True, "num_attention_heads": 4, "head_dim": 8},
    {"text_config": [1, 2]}, {"layer_types": "sliding_attention", "sliding_window": -1},
])
def test_a_garbled_config_is_never_a_negative_need_nor_an_exception(
        tmp_path: Path, config: dict) -> None:
    folder = sized_model_dir(tmp_path / "m", weights_bytes=10**6, layers=2, heads=4,
                             kv_heads=2, head_dim=8)
    (folder / "config.json").write_text(json.dumps(config))
    need = mb.model_need(folder, 4096)
    assert not need.known or (need.weights_bytes == 10**6 and need.kv_bytes >= 0)


def test_the_automatic_budget_leaves_the_system_room() -> None:
    assert mb.automatic_budget_bytes(16 * 10**9) == 12 * 10**9  # 75%
    assert mb.automatic_budget_bytes(8 * GIB) == 6 * GIB  # 75% and 2 GiB left agree
    assert mb.automatic_budget_bytes(6 * GIB) == 4 * GIB  # 2 GiB left wins over 75%
    assert mb.automatic_budget_bytes(3 * GIB) == int(1.5 * GIB)  # never under half


def test_the_budget_comes_from_the_environment_then_the_config_then_the_machine(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mb.ENV_BUDGET_MB, raising=False)
    auto = mb.current_budget(physical=16 * 10**9)
    assert (auto.total_bytes, auto.source) == (12 * 10**9, "automatic")
    assert "75% of 16.0 GB" in auto.describe()
    settings = Settings()
    settings.memory_budget_gb = 9.5
    settings.save()
    assert Settings.load().memory_budget_gb == 9.5
    configured = mb.current_budget(physical=16 * 10**9)
    assert (configured.total_bytes, configured.source) == (9_500_000_000, "memory_budget_gb")
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "1500")
    assert mb.current_budget().total_bytes == 1_500_000_000
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "lots")  # not a number: as if unset
    assert mb.current_budget(physical=16 * 10**9).source == "memory_budget_gb"


def test_a_refused_budget_setting_is_a_sentence_and_the_default_stands(llmdeck_home: Path) -> None:
    from core import paths

    paths.config_path().write_text('memory_budget_gb = -3\n')
    settings = Settings.load()
    assert settings.memory_budget_gb == 0
    assert any("memory budget must be 0 (automatic)" in p for p in settings.problems)


def test_the_refusal_names_the_numbers() -> None:
    need = mb.Need(15_100_000_000, 2_100_000_000, 8192)
    budget = mb.Budget(12 * 10**9, 16 * 10**9, "automatic")
    text = mb.refusal("Gemma 3 27B", need, 6_200_000_000, budget)
    assert text.startswith("Gemma 3 27B needs 17.2 GB (15.1 GB weights + 2.1 GB context cache "
                           "at 8,192 tokens); 6.2 GB of the 12.0 GB memory budget is free.")
    assert "memory_budget_gb" in text
    killed = mb.killed_while_loading("Gemma 3 27B", need, 6_200_000_000, budget)
    assert "ran out of memory" in killed and "needs 17.2 GB" in killed and "exit code" not in killed


def test_the_hub_verdict_is_the_admission_rule() -> None:
    budget = mb.Budget(12 * 10**9, 16 * 10**9, "automatic")
    assert mb.fit_verdict(12 * 10**9, budget) == "ok"
    assert mb.fit_verdict(12 * 10**9 + 1, budget) == "tight"
    assert mb.fit_verdict(16 * 10**9 + 1, budget) == "too_big"


def test_doctor_shows_the_budget_and_what_the_running_app_holds(
        llmdeck_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.doctor import OK, WARN, check_memory_budget
    from core.workers.pool import WorkerStatus
    from core.workers.status_file import status_path, write_status

    monkeypatch.setenv(mb.ENV_BUDGET_MB, "2600")
    assert "0.0 GB held by 0 loaded models, 2.6 GB free" in check_memory_budget().detail
    worker = WorkerStatus("chat#1", "Big\x1b[2J 4B", "mlx", "idle", os.getpid(), 0, 0, 0, 0.0, 0,
                          memory_bytes=1_240_000_000)
    write_status([worker], status_path("app"))  # as the running app writes it
    check = check_memory_budget()
    assert check.status == OK
    assert check.detail.startswith("2.6 GB (set by LLMDECK_MEMORY_BUDGET_MB")
    assert "1.2 GB held by 1 loaded model (Big␛[2J 4B), 1.4 GB free" in check.detail
    monkeypatch.setenv(mb.ENV_BUDGET_MB, str(10**9))  # a petabyte: more than this machine
    check = check_memory_budget()
    assert check.status == WARN and "memory_budget_gb" in check.fix
