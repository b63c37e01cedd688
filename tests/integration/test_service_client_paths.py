"""A path a person types in a terminal means that terminal's folder, not the service's:
the detached service runs in its own folder (core.service.launch), so a client sends
paths made absolute where they were typed (the loopback, in one process, hid this)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.runtime import AttachResult
from tests.helpers import service_proc as svc
from tui.service_runtime import ServiceRuntime


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def test_attach_of_a_relative_path_reads_the_file_in_the_apps_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc.start(*svc.scripted_args())
    work = tmp_path / "project"
    work.mkdir()
    (work / "notes.txt").write_text("The roof is red and the door is green.\n")
    monkeypatch.chdir(work)
    client = ServiceRuntime()
    await client.start()
    try:
        [result] = await client.attach(None, ["notes.txt"])
        assert isinstance(result, AttachResult), result
        [home_relative] = await client.attach(result.conversation_id, ["~/../nowhere.txt"])
        assert "nowhere.txt" in str(getattr(home_relative, "message", home_relative))
        [missing] = await client.attach(result.conversation_id, ["drafts/missing.txt"])
        assert missing.message.startswith("drafts/missing.txt does not exist"), missing
        assert missing.path == "drafts/missing.txt"  # as typed, not the absolute path sent
    finally:
        await client.close()


def test_the_model_option_names_a_file_in_the_folder_it_was_typed_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.cli import model_argument

    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    assert model_argument("tiny.gguf") == str(tmp_path / "tiny.gguf")
    assert model_argument("./tiny.gguf") == str(tmp_path / "tiny.gguf")
    assert model_argument("gemma3:270m") == "gemma3:270m"  # an id, not a file here
    assert model_argument(None) is None
