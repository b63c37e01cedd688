"""image_url content parts through the official openai client (issue 23): a vision model
(the tiny random-weight LLaVA, mlx-vlm in a real worker) answers about a data-URL image;
file:// URLs only where the setting allows them; a text-only model, a web URL, broken
base64 and a corrupt picture are 400s in the API's terms, and the server goes on."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from core.config import Settings
from core.engines.base import ModelSpec
from tests.fixtures.images import make_corrupt, make_image, picture
from tests.fixtures.serve import ServerThread, scripted_spec
from tests.fixtures.vlm_models import build_tiny_llava

pytestmark = pytest.mark.slow


def data_url(fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    picture(64, 48).save(buf, format=fmt)
    mime = {"PNG": "image/png", "JPEG": "image/jpeg"}[fmt]
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode()}"


def ask(url: str, text: str = "What is in the picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory) -> Iterator[ServerThread]:
    home = tmp_path_factory.mktemp("serve-vision-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMDECK_HOME", str(home))
        model = build_tiny_llava(tmp_path_factory.mktemp("vlm") / "tiny-llava")
        spec = ModelSpec(str(model), "mlx-vlm", context_size=1024, options=(("label", "tiny"),))
        srv = ServerThread(spec, served_name="tiny")
        yield srv
        srv.close()


def test_a_vision_model_reads_data_urls_and_file_urls_when_allowed(
        vlm_server: ServerThread, tmp_path: Path) -> None:
    client = openai.OpenAI(base_url=vlm_server.url, api_key="x")
    reply = client.chat.completions.create(model="tiny", messages=ask(data_url("PNG")),
                                           max_tokens=5, temperature=0.0)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 5
    photo = make_image(tmp_path / "local.png")
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=ask(photo.as_uri()), max_tokens=3)
    assert err.value.body["code"] == "file_urls_disabled"
    assert "serve_allow_file_urls" in err.value.body["message"]
    vlm_server.runtime.settings.serve_allow_file_urls = True
    try:
        same = client.chat.completions.create(model="tiny", messages=ask(photo.as_uri()),
                                              max_tokens=5, temperature=0.0)
    finally:
        vlm_server.runtime.settings.serve_allow_file_urls = False
    # The same picture, as a file: the same greedy answer (JPEG vs PNG source aside, the
    # stored copy of a lossless PNG matches the data URL's pixels).
    assert same.usage.completion_tokens == 5 and same.choices[0].message.content


@pytest.mark.parametrize(("url", "code", "words"), [
    ("https://example.com/cat.png", "remote_images_unsupported", "does not fetch images"),
    ("data:image/png;base64,%%%notbase64", "invalid_image", "not valid base64"),
    ("data:text/plain;base64,aGVsbG8=", "invalid_image", "data:image/png;base64"),
    ("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nbroken" * 20).decode(),
     "invalid_image", "The image could not be read as PNG"),
])
def test_bad_images_are_400s_and_the_server_goes_on(vlm_server: ServerThread, url: str,
                                                    code: str, words: str) -> None:
    client = openai.OpenAI(base_url=vlm_server.url, api_key="x")
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=ask(url), max_tokens=3)
    body = err.value.body
    assert body["code"] == code and words in body["message"], body
    assert body["param"] == "messages[0].content[1].image_url"
    ok = client.chat.completions.create(model="tiny", messages=[
        {"role": "user", "content": "hi"}], max_tokens=2)
    assert ok.choices[0].finish_reason == "length"


def test_a_text_only_model_says_it_cannot_see(llmdeck_home: Path, tmp_path: Path) -> None:
    srv = ServerThread(scripted_spec(), served_name="plain", settings=Settings())
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="x")
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="plain", messages=ask(data_url()))
        assert err.value.status_code == 400
        assert err.value.body["code"] == "model_not_vision"
        assert "cannot see images: it is a text-only model" in err.value.body["message"]
        make_corrupt(tmp_path / "unused.png")  # nothing was written for the refused image
        assert not list((llmdeck_home / "data" / "images").glob("incoming-*"))
    finally:
        srv.close()
