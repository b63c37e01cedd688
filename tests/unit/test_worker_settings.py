"""Engines never read the config file (core.engines sits below core.config): the worker
hands them the settings they use, here the disk KV cache's bound."""

from __future__ import annotations

from pathlib import Path

from core.engines.base import ModelSpec
from core.engines.kv_store import DEFAULT_GB, disk_budget_bytes
from core.workers.worker_main import with_settings


def _config(home: Path, text: str) -> None:
    folder = home / "config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(text, encoding="utf-8")


def test_the_worker_fills_the_disk_bound_from_the_setting(llmdeck_home: Path) -> None:
    _config(llmdeck_home, "kv_disk_gb = 0\n")
    spec = with_settings(ModelSpec("/m.gguf", "llamacpp", context_size=512))
    assert spec.option("kv_disk_gb") == 0
    assert disk_budget_bytes(spec.option("kv_disk_gb")) == 0  # the store is off, as set


def test_an_option_the_spec_names_wins_over_the_setting(llmdeck_home: Path) -> None:
    _config(llmdeck_home, "kv_disk_gb = 0\n")
    spec = ModelSpec("/m.gguf", "llamacpp", context_size=512, options=(("kv_disk_gb", 2),))
    assert with_settings(spec) is spec
    assert disk_budget_bytes(None) == int(DEFAULT_GB * 1024**3)
