"""Validity checks catch the broken artifacts a registry must never offer as loadable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.hub.validate import check_gguf, check_mlx_dir, check_safetensors
from tests.fakes.hub_repos import make_gguf, make_safetensors, mlx_repo_files


def test_a_real_gguf_passes_and_a_renamed_text_file_does_not(tmp_path: Path) -> None:
    good = make_gguf(tmp_path / "m.gguf", 4096)
    assert check_gguf(good) is None
    fake = tmp_path / "fake.gguf"
    fake.write_text("this is not a model, just a file with the right suffix")
    assert "bad magic" in (check_gguf(fake) or "")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert check_gguf(empty) is not None


def test_truncated_safetensors_is_caught(tmp_path: Path) -> None:
    path = make_safetensors(tmp_path / "model.safetensors", 8192)
    assert check_safetensors(path) is None
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    assert "truncated" in (check_safetensors(path) or "")


def _mlx_dir(root: Path) -> Path:
    root.mkdir()
    for name, src in mlx_repo_files(root / "src").items():
        if isinstance(src, bytes):
            (root / name).write_bytes(src)
        else:
            shutil.copy(src, root / name)
    return root


def test_mlx_directory_rules(tmp_path: Path) -> None:
    model = _mlx_dir(tmp_path / "m")
    assert check_mlx_dir(model) is None

    (model / "tokenizer.json").unlink()
    (model / "tokenizer_config.json").unlink()
    assert "has no tokenizer" in (check_mlx_dir(model) or "")


def test_shards_need_an_index_naming_files_that_exist(tmp_path: Path) -> None:
    model = _mlx_dir(tmp_path / "m")
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    make_safetensors(model / "model-00002-of-00002.safetensors", 1024)
    assert "no *.safetensors.index.json" in (check_mlx_dir(model) or "")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    assert check_mlx_dir(model) is None
    (model / "model-00002-of-00002.safetensors").unlink()
    assert "lists weight files that are missing" in (check_mlx_dir(model) or "")


# A model folder's files, damaged into JSON of the wrong shape: (file, bytes, what the
# Local models list must say). Each used to raise out of the listing or the engine choice.
def _header(obj: object) -> bytes:
    raw = json.dumps(obj).encode()
    return len(raw).to_bytes(8, "little") + raw


DAMAGED = [
    ("config.json", b"[]", "config.json is not a model config"),
    ("config.json", b"\xff\xfe not utf-8", "config.json is not a model config"),
    ("model.safetensors.index.json", b'{"weight_map": [1, 2]}', "is not a valid safetensors index"),
    ("model.safetensors.index.json", b"[1]", "is not a valid safetensors index"),
    ("model.safetensors.index.json", b'{"weight_map": {"a": 1}}', "is not a valid safetensors index"),
    ("model.safetensors.index.json", b'{"weight_map": {"a": "../../x.safetensors"}}',
     "is not a valid safetensors index"),
    ("model.safetensors", _header([1]), "unreadable header"),
    ("model.safetensors", _header({"w": {"data_offsets": "far"}}), "unreadable header"),
]


@pytest.mark.parametrize(("name", "data", "said"), DAMAGED,
                         ids=["config-list", "config-bytes", "index-map-list", "index-list",
                              "index-map-ints", "index-escapes", "header-list", "header-offsets"])
def test_a_damaged_model_folder_is_listed_as_broken_and_refused_by_name(
        name: str, data: bytes, said: str) -> None:
    from core import paths
    from core.engines.select import SelectionError, check_safetensors, select_engine
    from core.hub.registry import list_local_models

    model = _mlx_dir(paths.models_dir() / "damaged")
    (model / name).write_bytes(data)
    listed = {m.name: m for m in list_local_models(include_bundled=False)}
    assert listed["damaged"].valid is False and said in (listed["damaged"].problem or "")
    with pytest.raises(SelectionError) as refused:  # the engine's own check, before loading
        check_safetensors(model / name) if name.endswith(".safetensors") else select_engine(model)
    assert refused.value.code == "MODEL_CORRUPT" and name.split(".")[0] in refused.value.message


def test_an_odd_quantization_entry_still_lists_the_model(tmp_path: Path) -> None:
    from core import paths
    from core.hub.registry import list_local_models

    model = _mlx_dir(paths.models_dir() / "odd")
    for quantization, shown in ((4, None), ({"bits": "four"}, None), ({"bits": 8}, "8bit")):
        (model / "config.json").write_text(json.dumps({"model_type": "llama",
                                                       "quantization": quantization}))
        odd = next(m for m in list_local_models(include_bundled=False) if m.name == "odd")
        assert odd.valid and odd.quant == shown
