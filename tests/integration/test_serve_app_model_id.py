"""The app's own model is listed once, by its id, on `llmdeck serve`: /v1/models (openai
client), /api/tags and /api/ps (ollama client) all name it `name:tag` as they name every
other local model, and both its id and its display name reach it.

It was listed twice on /v1/models and /api/tags (its display name, then its id) and
named by display name on /api/ps, where Ollama's clients look for the id. The app's model
here is a small random-weight MLX folder in the home's models folder (a real worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ollama
import openai
import pytest

from core import paths
from core.config import Settings
from tests.fixtures.mlx_models import LLAMA_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread, served

pytestmark = pytest.mark.timeout(300)
ID, DISPLAY = "tinyllama:2m", "TinyLlama-2M"  # the id the folder name gives, and the name


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("app-id-home")


@pytest.fixture(autouse=True)
def server_home(llmdeck_home: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server lists the models of the home it runs in, not each test's own."""
    monkeypatch.setenv("LLMDECK_HOME", str(home))


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ServerThread]:
    with pytest.MonkeyPatch.context() as env:  # paths puts models under LLMDECK_HOME
        env.setenv("LLMDECK_HOME", str(home))
        folder = paths.models_dir() / DISPLAY
        build_model_dir(folder, LLAMA_SHAPE, seed=2)
    # as `llmdeck serve --model FOLDER` sets it up: the model in the settings, no spec
    yield from served(None, home, settings=Settings(model=str(folder), engine="mlx",  # type: ignore[arg-type]
                                                    context_size=512))


def test_the_apps_model_is_listed_once_by_id_everywhere(server: ServerThread) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
    listed = [m for m in client.models.list() if ID in m.id or DISPLAY in (m.id, m.model_extra.get("name"))]
    assert [m.id for m in listed] == [ID]
    assert listed[0].model_extra["name"] == DISPLAY == server.runtime.model.name  # beside it
    host = server.url.removesuffix("/v1")
    tags = [m.model for m in ollama.Client(host=host).list().models]
    assert ID in tags and len(tags) == len(set(tags)) and DISPLAY not in tags
    assert [m.model for m in ollama.Client(host=host).ps().models] == [ID]
    for name in (ID, DISPLAY):  # both reach the app's model (no second load)
        reply = client.chat.completions.create(model=name, max_tokens=2, temperature=0,
                                               messages=[{"role": "user", "content": "Hi"}])
        assert reply.choices[0].finish_reason in ("stop", "length")
    assert len(server.runtime.pool.models()) == 1
