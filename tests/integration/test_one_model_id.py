"""One model, one id (issue 45 item 2): the bundled model is `gemma3:270m-q4_k_m` in the
header's state, the pool's rows (F4, `llmdeck workers`, `service status`, /metrics),
/v1/models, `models list` and the F5 picker; and an id /v1/models listed once stays
servable.

It was "Gemma 3 270M (Q4_K_M, bundled)" in the header and the pool, `gemma3:270m-q4_k_m`
in the API, `bundled:gemma-3-270m` in `models list`: /v1/models right after a first
start listed the display name (the model was still being provisioned), and once it was
ready every request naming that listed name got 404. A real llama.cpp worker runs the
bundled GGUF (linked into the home's models folder, where a first run puts it).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import bundled, paths
from core.config import Settings
from tests.fixtures.serve import ServerThread

pytestmark = pytest.mark.timeout(300)
ID = "gemma3:270m-q4_k_m"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("one-id-home")


@pytest.fixture(autouse=True)
def server_home(llmdeck_home: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMDECK_HOME", str(home))


@pytest.fixture(scope="module")
def first_start(home: Path, bundled_gguf: Path) -> Iterator[tuple[ServerThread, list[str]]]:
    """A first run (no config.toml): the model is provisioned, then loaded; /v1/models is
    read at once, before the model is ready."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LLMDECK_HOME", str(home))
        env.setenv("LLMDECK_IN_PROCESS", "1")
        (paths.models_dir() / bundled.BUNDLED_CHAT_NAME).symlink_to(bundled_gguf)
        server = ServerThread(None, settings=Settings(context_size=512),  # type: ignore[arg-type]
                              wait_ready=False)
        try:
            early = [m["id"] for m in _get(server, "/v1/models")["data"]
                     if m.get("owned_by") == "llmdeck"]
            assert server.call(server.runtime.ensure_model()), server.runtime.model.error
            yield server, early
        finally:
            server.close()


def _get(server: ServerThread, path: str) -> dict:
    with urllib.request.urlopen(server.url.removesuffix("/v1") + path, timeout=60) as r:
        return json.loads(r.read())


def _chat(server: ServerThread, model: str) -> int:
    body = json.dumps({"model": model, "max_tokens": 2, "temperature": 0,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
    request = urllib.request.Request(server.url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def test_every_surface_names_the_model_by_one_id(first_start: tuple[ServerThread, list[str]]) -> None:
    server, _ = first_start
    rt = server.runtime
    assert rt.model.label == ID  # the header's model line
    assert rt.model.name == bundled.BUNDLED_CHAT_LABEL  # the display name, beside it
    assert {w.model for w in rt.pool.status()} == {ID}  # F4, `workers`, `service status`
    listed = [m for m in _get(server, "/v1/models")["data"] if m.get("owned_by") == "llmdeck"]
    assert [m["id"] for m in listed] == [ID]
    metrics = urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics",
                                     timeout=30).read().decode()
    assert f'model="{ID}"' in metrics and "Gemma 3 270M" not in metrics
    from core.hub import list_local_models

    assert [m.model_id for m in list_local_models() if m.source == "bundled"] == [ID]


def test_an_id_listed_right_after_start_stays_servable(
        first_start: tuple[ServerThread, list[str]]) -> None:
    server, early = first_start
    assert early == [ID], "listed before the model was ready: its id, not its display name"
    for name in (*early, ID, bundled.BUNDLED_CHAT_LABEL):  # the old display name still reaches it
        assert [_chat(server, name) for _ in range(2)] == [200, 200], name
    assert len(server.runtime.pool.models()) == 1  # one model, not a second load


async def test_the_scripted_engine_has_one_id_whichever_way_it_is_named() -> None:
    """`--engine scripted` (a fixed spec with no label) and `model = "scripted"` in the
    config name one model: both header labels are its id, `scripted:latest` (the first
    said `scripted`)."""
    from core import model_ids
    from core.engines.base import ModelSpec
    from core.runtime import Runtime

    labels = []
    for runtime in (Runtime(Settings(), model_spec=ModelSpec("scripted", "scripted", 4096)),
                    Runtime(Settings(model="scripted", engine="scripted"))):
        await runtime.start(preload=False)
        try:
            assert await runtime.ensure_model(), runtime.model_state().error
            labels.append(runtime.model_state().label)
        finally:
            await runtime.close()
    assert labels == [model_ids.base_id("scripted")] * 2 == ["scripted:latest"] * 2
