"""A chat model whose file is gone is told with the fix that brings it back: a downloaded
model removed with `llmdeck models rm` was told to run `models restore-default`, which
only unpacks the bundled Gemma (and so never brought it back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bundled import BUNDLED_CHAT_NAME
from core.runtime import engine_for
from core.workers.load_error import WorkerLoadError


def test_a_removed_download_is_told_to_download_it_again(tmp_path: Path) -> None:
    with pytest.raises(WorkerLoadError) as gone:
        engine_for(tmp_path / "tiny-gemma-3-270m-Q4_K_M.gguf")
    assert "Model file not found" in gone.value.message
    assert "download it again" in gone.value.message
    assert "restore-default" not in gone.value.message


def test_the_bundled_model_is_told_to_restore_it(tmp_path: Path) -> None:
    with pytest.raises(WorkerLoadError) as gone:
        engine_for(tmp_path / BUNDLED_CHAT_NAME)
    assert "`llmdeck models restore-default`" in gone.value.message
