"""The parts of llama.cpp's vision path that need no model: which projector goes with a GGUF,
and how image parts become media markers in the prompt (core.engines.llama_vision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines.llama_vision import (
    MARKER,
    ProjectorError,
    find_mmproj,
    image_paths,
    with_markers,
)
from core.engines.select import SelectionError, sees_images, select_engine


def touch(path: Path) -> Path:
    path.write_bytes(b"GGUF")
    return path


def test_images_become_markers_in_order_and_a_typed_marker_is_defused() -> None:
    messages = (
        {"role": "system", "content": f"Be brief. {MARKER}"},
        {"role": "user", "content": [
            {"type": "image", "path": "/a.png"},
            {"type": "text", "text": f"Compare {MARKER} these"},
            {"type": "image", "path": "/b.png"},
        ]},
    )
    assert image_paths(messages) == ["/a.png", "/b.png"]
    out = with_markers(messages)
    assert out[0] == {"role": "system", "content": "Be brief. <_media_>"}
    assert out[1]["content"] == f"{MARKER}\nCompare <_media_> these\n{MARKER}"
    assert out[1]["content"].count(MARKER) == 2  # one per image, whatever the user typed
    assert image_paths([{"role": "user", "content": "no parts"}]) == []


def test_the_projector_beside_a_model_is_found_by_the_hubs_naming_rule(tmp_path: Path) -> None:
    model = touch(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf")
    assert find_mmproj(model) is None and not sees_images(model)
    proj = touch(tmp_path / "gemma-3-4b-it-mmproj-f16.gguf")  # not "mmproj-" first
    assert find_mmproj(model) == proj
    assert sees_images(model) and not sees_images(proj)  # what the chat asks before a load
    sel = select_engine(model)
    assert sel.engine == "llamacpp" and sel.mmproj == str(proj)
    assert "with vision projector gemma-3-4b-it-mmproj-f16.gguf" in sel.reason
    with pytest.raises(SelectionError, match="is a vision projector"):
        select_engine(proj)


def test_of_several_projectors_the_one_named_like_the_model_wins(tmp_path: Path) -> None:
    model = touch(tmp_path / "Qwen2.5-VL-3B-Instruct-Q4_K_M.gguf")
    touch(tmp_path / "mmproj-llava-1.5-7b-f16.gguf")
    touch(tmp_path / "mmproj-Qwen2.5-VL-3B-Instruct-Q8_0.gguf")
    best = touch(tmp_path / "mmproj-Qwen2.5-VL-3B-Instruct-f16.gguf")
    assert find_mmproj(model) == best


def test_an_explicit_projector_wins_and_a_missing_one_is_a_sentence(tmp_path: Path) -> None:
    model = touch(tmp_path / "m.gguf")
    touch(tmp_path / "mmproj-beside.gguf")
    chosen = touch(tmp_path / "elsewhere.gguf")
    assert find_mmproj(model, str(chosen)) == chosen
    with pytest.raises(ProjectorError, match="does not exist; fix the mmproj option"):
        find_mmproj(model, str(tmp_path / "gone.gguf"))


def test_a_hub_download_pairs_a_quant_in_a_subfolder_with_the_projector_at_the_top(
        tmp_path: Path) -> None:
    snapshot = tmp_path / "models--org--Vision-GGUF" / "snapshots" / "0123abc"
    (snapshot / "Q4_K_M").mkdir(parents=True)
    model = touch(snapshot / "Q4_K_M" / "Vision-Q4_K_M.gguf")
    touch(snapshot / "mmproj-Vision-Q8_0.gguf")
    best = touch(snapshot / "mmproj-Vision-F16.gguf")
    assert find_mmproj(model) == best
    elsewhere = tmp_path / "plain" / "sub"
    elsewhere.mkdir(parents=True)
    touch(tmp_path / "plain" / "mmproj-other.gguf")
    assert find_mmproj(touch(elsewhere / "m.gguf")) is None  # outside the hub cache: beside only
