"""Every local model by name on a real `llmdeck serve`, driven by the `openai` and `ollama`
Python clients: the listings show what is on disk and what is loaded, a request naming a
model loads it (beside the app's own model), keep_alive 0 unloads it once its reply ends,
an alias from config.toml names a model, scripts load and unload explicitly.

Two small random-weight MLX models sit in the home's models folder (real folders, real
worker processes); the app's own model is the scripted engine, as in the other serve tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from core import paths
from core.config import Settings
from tests.fixtures.mlx_models import LLAMA_SHAPE, QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread, scripted_spec, served

pytestmark = pytest.mark.timeout(300)
QWEN, LLAMA = "tinyqwen:1m", "tinyllama:2m"  # the ids the folder names below give
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("by-name-home")


@pytest.fixture(autouse=True)
def server_home(llmdeck_home: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server lists the models of the home it runs in, not each test's own."""
    monkeypatch.setenv("LLMDECK_HOME", str(home))


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ServerThread]:
    with pytest.MonkeyPatch.context() as env:  # paths puts models under LLMDECK_HOME
        env.setenv("LLMDECK_HOME", str(home))
        build_model_dir(paths.models_dir() / "TinyQwen-1M", QWEN3_SHAPE, seed=1)
        build_model_dir(paths.models_dir() / "TinyLlama-2M", LLAMA_SHAPE, seed=2)
    settings = Settings(aliases={"fast": QWEN}, keep_alive={LLAMA: "7m"}, context_size=512)
    yield from served(scripted_spec(), home, settings=settings)


def _host(server: ServerThread) -> str:
    return server.url.removesuffix("/v1")


def _loaded(server: ServerThread) -> dict[str, bool]:
    body = httpx.get(f"{server.url}/models", timeout=30).json()
    return {m["id"]: m["loaded"] for m in body["data"] if "loaded" in m}


def _wait_until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_the_lists_show_every_local_model_by_id_and_which_are_loaded(server: ServerThread) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
    ids = {m.id: m for m in client.models.list()}
    assert "scripted" in ids  # the app's own model, loaded
    assert {QWEN, LLAMA} <= set(ids)
    assert ids[LLAMA].model_extra["name"] == "TinyLlama-2M"  # the display name stays
    assert ids[LLAMA].model_extra["loaded"] is False
    tags = [m.model for m in ollama.Client(host=_host(server)).list().models]
    assert {QWEN, LLAMA, "scripted"} <= set(tags)


def test_a_request_by_name_loads_the_model_beside_the_apps(server: ServerThread) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
    reply = client.chat.completions.create(model=LLAMA, messages=HI, max_tokens=4, temperature=0)
    assert reply.model == LLAMA and reply.choices[0].finish_reason in ("stop", "length")
    loaded = _loaded(server)
    assert loaded[LLAMA] is True and loaded["scripted"] is True  # both at once
    running = {m.model: m for m in ollama.Client(host=_host(server)).ps().models}
    assert {LLAMA, "scripted"} <= set(running) and running[LLAMA].size > 0
    left = running[LLAMA].expires_at.timestamp() - time.time()  # [keep_alive] in config.toml
    assert 400 < left <= 421
    # an alias from config.toml names a model too
    reply = client.chat.completions.create(model="fast", messages=HI, max_tokens=3)
    assert reply.choices[0].finish_reason in ("stop", "length") and _loaded(server)[QWEN]


def test_keep_alive_zero_unloads_the_model_after_its_reply(server: ServerThread) -> None:
    client = ollama.Client(host=_host(server), timeout=120)
    reply = client.chat(model=QWEN, messages=HI, keep_alive=0, options={"num_predict": 4})
    assert reply.done and reply.message.content is not None
    assert _wait_until(lambda: QWEN not in {m.model for m in client.ps().models})
    assert _loaded(server)[QWEN] is False and _loaded(server)["scripted"] is True
    # the next request by name loads it again; keep_alive "5m" shows as its expiry
    client.chat(model=QWEN, messages=HI, keep_alive="5m", options={"num_predict": 2})
    [entry] = [m for m in client.ps().models if m.model == QWEN]
    left = entry.expires_at.timestamp() - time.time()
    assert 200 < left <= 301


def test_scripts_load_and_unload_explicitly(server: ServerThread) -> None:
    client = ollama.Client(host=_host(server), timeout=120)
    loaded = client.generate(model=LLAMA)  # Ollama's way: an empty prompt loads
    assert loaded.done_reason == "load" and _loaded(server)[LLAMA]
    unloaded = client.generate(model=LLAMA, keep_alive=0)  # ... and with keep_alive 0 unloads
    assert unloaded.done_reason == "unload" and not _loaded(server)[LLAMA]
    # the same through /v1/models/{id}/load and /unload
    up = httpx.post(f"{server.url}/models/{LLAMA}/load", json={"keep_alive": -1}, timeout=120)
    assert up.status_code == 200 and up.json()["loaded"] and up.json()["expires_at"] is None
    assert up.json()["memory_bytes"] > 0
    down = httpx.post(f"{server.url}/models/{LLAMA}/unload", timeout=60)
    assert down.status_code == 200 and down.json()["loaded"] is False
    assert not _loaded(server)[LLAMA]


def test_unknown_names_and_bad_keep_alive_are_refused_with_a_sentence(server: ServerThread) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-9", messages=HI)
    assert "gpt-9" in missing.value.message and "GET /v1/models" in missing.value.message
    bad = httpx.post(f"{server.url}/chat/completions", timeout=30,
                     json={"model": QWEN, "messages": HI, "keep_alive": "soon"})
    assert bad.status_code == 400 and "5m" in bad.json()["error"]["message"]
    gone = httpx.post(f"{server.url}/models/nope:1b/load", timeout=30)
    assert gone.status_code == 404 and "nope:1b" in gone.json()["error"]["message"]
    assert httpx.get(f"{_host(server)}/health", timeout=30).status_code == 200  # still up


def test_hostile_load_and_unload_calls_are_refused_and_the_server_stays_up(
        server: ServerThread) -> None:
    base = f"{server.url}/models"
    cases = [
        (httpx.post(f"{base}/{'x' * 4000}/load", timeout=30), 404, "GET /v1/models"),
        (httpx.post(f"{base}/..%2F..%2Fetc%2Fpasswd/load", timeout=30), 404, "No local model"),
        (httpx.post(f"{base}/{LLAMA}/load", content=b"{nope", timeout=30,
                    headers={"Content-Type": "application/json"}), 400, "JSON"),
        (httpx.post(f"{base}/{LLAMA}/load", json={"keep_alive": {"a": [1]}}, timeout=30), 400,
         "keep_alive"),
        (httpx.post(f"{base}/{LLAMA}/load", json={"keep_alive": "9" * 60}, timeout=30), 400,
         "keep_alive"),
        (httpx.get(f"{base}/{LLAMA}/load", timeout=30), 405, "does not accept"),
    ]
    for answer, code, words in cases:
        assert answer.status_code == code, (answer.status_code, answer.text[:200])
        message = answer.json()["error"]["message"]
        assert words in message and len(message) < 600, message[:300]
    assert not _loaded(server)[LLAMA]  # none of them loaded anything
    assert httpx.get(f"{_host(server)}/health", timeout=30).status_code == 200
