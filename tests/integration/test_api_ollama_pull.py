"""Ollama's POST /api/pull and DELETE /api/delete on `llmdeck serve` (issue 45 item 1):
the official `ollama` client pulls `hf.co/<owner>/<repo>:<quant>` from the (fake) Hub as a
job of the service, with Ollama's streamed progress lines, then deletes it by its id.
It was a 404 ("models are fetched with llmdeck's hub") before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from tests.fakes.hub_repos import make_gguf, point_client_at
from tests.fakes.hub_server import FakeHub
from tests.fixtures.serve import ServerThread, scripted_spec, served

pytestmark = pytest.mark.timeout(180)
REPO, FILE = "acme/Pulled-GGUF", "pulled-Q8_0.gguf"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerThread]:
    hub = FakeHub()
    hub.add_repo(REPO, {FILE: make_gguf(tmp_path / "src" / FILE, 256 * 1024)},
                 library_name="gguf", tags=["gguf"])
    home = tmp_path / "home"
    home.mkdir()
    with hub:
        point_client_at(monkeypatch, hub)  # (huggingface_hub read its constants at import)
        yield from served(scripted_spec(), home)


def test_pull_streams_ollamas_lines_then_delete_removes_it(server: ServerThread) -> None:
    client = ollama.Client(host=server.url.removesuffix("/v1"))
    lines = list(client.pull(f"hf.co/{REPO}:Q8_0", stream=True))
    statuses = [line.status for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    pulling = [line for line in lines if (line.status or "").startswith("pulling pulled")]
    assert pulling and pulling[-1].completed == pulling[-1].total >= 256 * 1024
    tags = [m.model for m in client.list().models]
    assert "pulled:q8_0" in tags
    from core.hub.jobs import existing_jobs

    assert [j.state for j in existing_jobs(server.runtime).jobs] == ["done"]  # a service job

    client.delete("pulled:q8_0")
    assert "pulled:q8_0" not in [m.model for m in client.list().models]
    with pytest.raises(ollama.ResponseError) as caught:
        client.delete("pulled:q8_0")
    assert caught.value.status_code == 404


def test_a_pull_naming_no_repo_or_quant_says_what_to_name(server: ServerThread) -> None:
    client = ollama.Client(host=server.url.removesuffix("/v1"))
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("llama3.2")
    assert caught.value.status_code == 400 and "hf.co/<owner>/<repo>:<quant>" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull(f"hf.co/{REPO}:Q2_K")
    assert caught.value.status_code == 404 and "Q2_K" in caught.value.error
    done = client.pull(f"hf.co/{REPO}:Q8_0", stream=False)  # one answer at the end
    assert done.status == "success"
