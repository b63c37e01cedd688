"""Validity checks catch the broken artifacts a registry must never offer as loadable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
    assert check_mlx_dir(model) == "no tokenizer files"


def test_shards_need_an_index_naming_files_that_exist(tmp_path: Path) -> None:
    model = _mlx_dir(tmp_path / "m")
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    make_safetensors(model / "model-00002-of-00002.safetensors", 1024)
    assert "no model.safetensors.index.json" in (check_mlx_dir(model) or "")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    assert check_mlx_dir(model) is None
    (model / "model-00002-of-00002.safetensors").unlink()
    assert "missing shards" in (check_mlx_dir(model) or "")
