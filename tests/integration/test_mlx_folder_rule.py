"""One rule for an MLX model folder, checked against what really loads.

The hub's validity check (core.hub.validate.check_mlx_dir), the engine's choice
(core.engines.select) and the engine's load (core.engines.mlx) all read
core.model_files.mlx_folder. Each folder below is a real tiny model damaged one way;
mlx-lm's own loader (what the MLX engine calls) says that it does not load, and all three
must refuse it with the same sentence. Before the rule was shared, a folder whose weights
were not named model*.safetensors passed both checks and failed only in mlx-lm.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from core.engines.base import EngineLoadError, ModelSpec
from core.engines.mlx import MlxEngine
from core.engines.select import SelectionError, select_engine
from core.hub.validate import check_mlx_dir as hub_check
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir


def _weights_renamed(d: Path) -> None:
    (d / "model.safetensors").rename(d / "weights.safetensors")


def _index_names_other_files(d: Path) -> None:
    import mlx.core as mx

    keys = list(mx.load(str(d / "model.safetensors")))
    (d / "model.safetensors").rename(d / "part-1.safetensors")
    index = {"weight_map": dict.fromkeys(keys, "part-1.safetensors")}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


def _no_config(d: Path) -> None:
    (d / "config.json").unlink()


def _config_not_an_object(d: Path) -> None:
    (d / "config.json").write_text("[]")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "weights-renamed": _weights_renamed,
    "index-names-other-files": _index_names_other_files,
    "no-config": _no_config,
    "config-not-an-object": _config_not_an_object,
}


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("good"), QWEN3_SHAPE)


def _mlx_lm_loads(d: Path) -> bool:
    from mlx_lm.utils import load

    try:
        load(str(d))
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return False
    return True


def test_the_whole_folder_loads_and_passes_every_check(good_dir: Path) -> None:
    assert _mlx_lm_loads(good_dir)
    assert select_engine(good_dir).engine == "mlx"
    assert hub_check(good_dir) is None


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_folder_that_does_not_load_is_refused_with_one_sentence(
        good_dir: Path, tmp_path: Path, damage: str) -> None:
    d = tmp_path / "m"
    shutil.copytree(good_dir, d)
    DAMAGE[damage](d)
    assert not _mlx_lm_loads(d)
    with pytest.raises(SelectionError) as chosen:
        select_engine(d)
    sentence = chosen.value.message
    assert hub_check(d) == sentence
    with pytest.raises(EngineLoadError) as loaded:
        MlxEngine(ModelSpec(str(d), "mlx", options=(("warmup_batch_sizes", ()),)))
    assert (loaded.value.code, loaded.value.message) == (chosen.value.code, sentence)
    assert d.name in sentence and sentence.endswith(".")  # says which folder, a sentence
