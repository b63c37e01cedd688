"""Every load failure a user can cause gives an EngineLoadError with a code and a sentence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.engines.base import EngineLoadError, ModelSpec
from core.engines.mlx import MlxEngine
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("good"), QWEN3_SHAPE)


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def load(path: Path) -> MlxEngine:
    return MlxEngine(ModelSpec(str(path), "mlx", options=(("warmup_batch_sizes", ()),)))


def test_truncated_weights_are_model_corrupt(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert err.value.code == "MODEL_CORRUPT"
    assert "model.safetensors" in err.value.message and "re-download" in err.value.message


def test_garbage_weights_are_model_corrupt(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    (d / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert err.value.code == "MODEL_CORRUPT"


def test_weights_not_matching_config_are_model_corrupt(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert err.value.code == "MODEL_CORRUPT"
    assert "config.json" in err.value.message


def test_unknown_architecture_is_unsupported_before_loading(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    config["model_type"] = "frobnicator9"
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert err.value.code == "UNSUPPORTED"
    msg = err.value.message
    assert msg.startswith(
        "Model architecture 'frobnicator9' is not supported by the MLX engine. Supported: ["
    )
    assert "qwen3" in msg and "llama" in msg and msg.endswith("]")


def test_shards_without_index_are_refused_naming_them(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    w = d / "model.safetensors"
    shutil.copy(w, d / "model-00001-of-00002.safetensors")
    w.rename(d / "model-00002-of-00002.safetensors")
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert "model-00001-of-00002.safetensors" in err.value.message
    assert "model-00002-of-00002.safetensors" in err.value.message
    assert "index" in err.value.message


def test_missing_tokenizer_is_refused(good_dir, tmp_path):
    d = copy_of(good_dir, tmp_path / "m")
    (d / "tokenizer.json").unlink()
    with pytest.raises(EngineLoadError) as err:
        load(d)
    assert err.value.code == "LOAD_FAILED" and "tokenizer" in err.value.message
