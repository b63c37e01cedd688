"""Which MLX folders start their worker without torch (core.engines.torchless)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.engines.torchless import plain_fast_tokenizer


def _folder(path: Path, **files: object) -> Path:
    """A model folder with a tokenizer.json and a config.json, plus `files` (name__json)."""
    path.mkdir(exist_ok=True)
    for name, content in {"tokenizer.json": {}, "config.json": {}, **files}.items():
        (path / name.replace("__", ".")).write_text(json.dumps(content))
    return path


def test_a_plain_tokenizer_json_needs_no_torch(tmp_path: Path) -> None:
    assert plain_fast_tokenizer(_folder(tmp_path / "m", tokenizer_config__json={"eos_token": "x"}))


def test_remote_code_a_slow_tokenizer_or_a_processor_keeps_torch(tmp_path: Path) -> None:
    remote = _folder(tmp_path / "remote",
                     tokenizer_config__json={"auto_map": {"AutoTokenizer": ["x.T", None]}})
    assert not plain_fast_tokenizer(remote)
    slow = _folder(tmp_path / "slow")
    (slow / "tokenizer.json").unlink()
    assert not plain_fast_tokenizer(slow)
    assert not plain_fast_tokenizer(_folder(tmp_path / "vision", preprocessor_config__json={}))
    broken = _folder(tmp_path / "broken")
    (broken / "config.json").write_text("not json")
    assert not plain_fast_tokenizer(broken)


def test_a_hidden_torch_reads_as_not_installed_and_the_switch_keeps_it(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "plain")
    code = ("import importlib.util, sys; from pathlib import Path;"
            "from core.engines.torchless import hide_torch_for;"
            f"print(hide_torch_for(Path({str(folder)!r})), importlib.util.find_spec('torch') is None)")
    root = str(Path(__file__).resolve().parents[2])
    hidden = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=root, check=True, env={"PYTHONPATH": root})
    assert hidden.stdout.split() == ["True", "True"]
    kept = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          check=True, env={"PYTHONPATH": root, "LLMDECK_WORKER_TORCH": "1"})
    assert kept.stdout.split()[0] == "False"
