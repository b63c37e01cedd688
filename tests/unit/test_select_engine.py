"""select_engine decides from the artifact alone and explains every refusal."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from core.engines.select import SelectionError, check_safetensors, mlx_has_gpu, select_engine


def safetensors_bytes(n_floats: int = 4) -> bytes:
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}
    ).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * (4 * n_floats)


def model_dir(root: Path, *, tokenizer: bool = True, weights: tuple[str, ...] = ("model.safetensors",)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    for name in weights:
        (root / name).write_bytes(safetensors_bytes())
    return root


def test_model_folder_goes_to_mlx(tmp_path):
    sel = select_engine(model_dir(tmp_path / "m"))
    assert sel.engine == "mlx" and sel.mmproj is None
    assert ("GPU" if mlx_has_gpu() else "CPU") in sel.reason


def test_sharded_folder_with_index_goes_to_mlx(tmp_path):
    d = model_dir(tmp_path / "m", weights=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert select_engine(d).engine == "mlx"


def test_shards_without_index_name_the_files(tmp_path):
    d = model_dir(tmp_path / "m", weights=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"))
    with pytest.raises(SelectionError) as err:
        select_engine(d)
    assert "model-00001-of-00002.safetensors" in err.value.message and "model-00002-of-00002.safetensors" in err.value.message


def test_index_naming_a_missing_shard_is_corrupt(tmp_path):
    d = model_dir(tmp_path / "m", weights=("model-00001-of-00002.safetensors",))
    index = {"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SelectionError) as err:
        select_engine(d)
    assert err.value.code == "MODEL_CORRUPT" and "model-00002-of-00002.safetensors" in err.value.message


def test_folder_without_config_is_refused(tmp_path):
    d = model_dir(tmp_path / "m")
    (d / "config.json").unlink()
    with pytest.raises(SelectionError) as err:
        select_engine(d)
    assert "config.json" in err.value.message


def test_folder_without_tokenizer_is_refused(tmp_path):
    with pytest.raises(SelectionError) as err:
        select_engine(model_dir(tmp_path / "m", tokenizer=False))
    assert "tokenizer" in err.value.message


def test_folder_without_weights_is_refused(tmp_path):
    with pytest.raises(SelectionError) as err:
        select_engine(model_dir(tmp_path / "m", weights=()))
    assert "safetensors" in err.value.message


def test_gguf_goes_to_llamacpp_with_sibling_projector(tmp_path):
    (tmp_path / "model-Q4_K_M.gguf").write_bytes(b"GGUF")
    (tmp_path / "mmproj-model-f16.gguf").write_bytes(b"GGUF")
    sel = select_engine(tmp_path / "model-Q4_K_M.gguf")
    assert sel.engine == "llamacpp"
    assert sel.mmproj == str(tmp_path / "mmproj-model-f16.gguf")
    assert "vision projector" in sel.reason


def test_gguf_without_projector(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    sel = select_engine(tmp_path / "m.gguf")
    assert sel.engine == "llamacpp" and sel.mmproj is None


def test_projector_alone_is_refused(tmp_path):
    (tmp_path / "mmproj-x.gguf").write_bytes(b"GGUF")
    with pytest.raises(SelectionError) as err:
        select_engine(tmp_path / "mmproj-x.gguf")
    assert "vision projector" in err.value.message


def test_missing_path_and_other_files_are_refused(tmp_path):
    with pytest.raises(SelectionError):
        select_engine(tmp_path / "nope")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(SelectionError) as err:
        select_engine(tmp_path / "weights.bin")
    assert err.value.code == "UNSUPPORTED"


def test_truncated_safetensors_is_detected_from_the_header(tmp_path):
    good = tmp_path / "good.safetensors"
    good.write_bytes(safetensors_bytes(8))
    check_safetensors(good)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(safetensors_bytes(8)[:-5])
    with pytest.raises(SelectionError) as err:
        check_safetensors(bad)
    assert err.value.code == "MODEL_CORRUPT" and "bad.safetensors" in err.value.message
